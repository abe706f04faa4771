"""FastAPI written the idiomatic way: the model is the body parameter and the return annotation is the
response model, so FastAPI does the parsing, validation and serialization itself."""

from fastapi import FastAPI

from benchmarks.apps import GenerateRequest, GenerateResponse, respond

app = FastAPI()


@app.post("/generate")
async def generate(request: GenerateRequest) -> GenerateResponse:
    return respond(request)
