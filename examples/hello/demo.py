"""Run the hello chain in this process with `chains.run_local` and print the result."""

import asyncio
from pathlib import Path

import chains
from chains.loader import import_chain_file

module, _ = import_chain_file(Path(__file__).with_name("chain.py"))

with chains.run_local():
    hello = module.Hello()
    for line in asyncio.run(hello.run_remote(["Ada", "Grace", "Barbara"])):
        print(line)
