"""``chains ui NAME``: a web page on this machine that shows a running chain at work.

The chain's graph, each chainlet's state, restarts and replicas, its request rate, latency,
errors and calls in flight over the last minutes, the recent traces as waterfalls, a log tail
per chainlet, and a form to call the entrypoint that shows a streamed answer as it arrives.
Every asset ships in this package (``static/``): the page needs no network beyond the loopback.
Nothing here is imported by ``import chains``; the command loads it when it runs::

    from chains.ui.serve import serve_dashboard
    serve_dashboard("streaming", port=8765)
"""
