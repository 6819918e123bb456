"""The Wafer-Scale Cluster appliance: the cluster management server and its wsjobs.

    jobs.py    the wsjob record, its phases, ids and the server's own SQLite book
    ops.py     the request table: operation name -> handler, argument schema, who may call
    server.py  the server process: sockets, limits per caller, the dispatch loop, job runs
    replicas.py  an execute job's replicas as the csrun_wse job that holds their nodes
    client.py  the client side of the protocol (used by `run.py CSX` and `csctl`)
    tls.py     TCP with TLS: the server's context and the per-user token file

Never prints; the front ends (runtime/cli/appliance.py, scripts/csctl.py,
scripts/cluster_server.py) do.
"""
