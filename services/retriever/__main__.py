from ragmesh.serving import main
from services.retriever.app import RetrieverApp

if __name__ == "__main__":
    main("retriever", RetrieverApp, lambda s: s.retriever_port)
