from ragmesh.serving import main
from services.generator.app import GeneratorApp

if __name__ == "__main__":
    main("generator", GeneratorApp, lambda s: s.generator_port)
