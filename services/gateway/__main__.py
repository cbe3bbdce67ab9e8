import uvloop

from ragmesh.serving import main
from services.gateway.app import GatewayApp

if __name__ == "__main__":
    # uvloop: a third less of the gateway's own time a request than asyncio's loop (make bench, pipeline:
    # REUSE's strategy event - its embedding 2.1 -> 1.5 ms). Not for the embedder: on uvloop its batcher
    # woke sooner, made smaller batches and spent 165 instead of 140 CPU s on make bench's load part,
    # which answered 903 instead of 1,176 questions at 200 concurrent chats.
    main("gateway", GatewayApp, lambda s: s.gateway_port, loop_factory=uvloop.new_event_loop)
