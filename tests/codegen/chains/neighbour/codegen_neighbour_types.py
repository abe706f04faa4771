"""Types the neighbour chain imports from a module next to its chain file."""

import enum

import pydantic


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(pydantic.BaseModel):
    x: float
    y: float


class Box(pydantic.BaseModel):
    corner: Point
    color: Color = Color.RED


ORIGIN_X = 0.0
