"""The code generator: from a checked chain to one runnable, shippable directory per chainlet.

>>> from pathlib import Path
>>> from chains.loader import load_chain
>>> import chains_codegen
>>> chain = load_chain("examples/hello/chain.py")                                  # doctest: +SKIP
>>> result = chains_codegen.generate(chain, Path("examples/hello/chain.py"), Path("build"))  # doctest: +SKIP
>>> result.chainlets["Greeter"].directory                                           # doctest: +SKIP
PosixPath('build/Greeter')

``chains generate FILE --out DIR`` does the same from the command line.
"""

from chains_codegen.generator import DEFAULT_BASE_IMAGE, GeneratedChain, GeneratedChainlet, generate
from chains_codegen.layout import GENERATOR_VERSION

__all__ = ["DEFAULT_BASE_IMAGE", "GENERATOR_VERSION", "GeneratedChain", "GeneratedChainlet", "generate"]
