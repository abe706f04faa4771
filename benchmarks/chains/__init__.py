"""Small chains that the HTTP benchmarks generate with ``codegen`` and serve as real chainlet servers."""
