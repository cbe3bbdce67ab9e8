from ragmesh.serving import main
from services.gateway.app import GatewayApp

if __name__ == "__main__":
    main("gateway", GatewayApp, lambda s: s.gateway_port)
