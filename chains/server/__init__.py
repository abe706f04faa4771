"""The chainlet server runtime: the ASGI app, its settings, metrics and the uvicorn runner.

Generated servers use ``chains.server.serve.create_app`` and ``chains.server.serve.main``.
"""
