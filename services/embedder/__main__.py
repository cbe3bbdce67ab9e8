from ragmesh.serving import main
from services.embedder.app import EmbedderApp

if __name__ == "__main__":
    main("embedder", EmbedderApp, lambda s: s.embedder_port)
