"""The settings models (ragmesh.config): every variable read one way, bad values refused with a line
naming the variable, each service's own model, and the operators' table generated from them."""
from __future__ import annotations

from pathlib import Path

import pytest

from ragmesh import config, configdoc, serving
from ragmesh.config import (EmbedderSettings, GatewaySettings, GeneratorSettings, RetrieverSettings, ServiceSettings,
                            Settings)
from ragmesh.errors import ConfigError
from services.embedder.app import EmbedderApp
from services.gateway.app import GatewayApp
from services.generator.app import GeneratorApp
from services.retriever.app import RetrieverApp

FLAGS = [(name, config.variables(name, Settings)[0]) for name, info in Settings.model_fields.items()
         if info.annotation is bool]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing of this machine's environment: each test sets what it reads."""
    for section in config.SECTIONS:
        for name in section.model_fields:
            for variable in config.variables(name, section):
                monkeypatch.delenv(variable, raising=False)


def test_every_flag_is_parsed_the_same_way(monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(FLAGS) == 10
    for name, variable in FLAGS:
        for word in ("1", "true", "TRUE", "yes", "on", " On "):
            monkeypatch.setenv(variable, word)
            assert getattr(config.load(), name) is True, (variable, word)
        for word in ("0", "false", "False", "no", "off", ""):
            monkeypatch.setenv(variable, word)
            assert getattr(config.load(), name) is False, (variable, word)
        monkeypatch.setenv(variable, "maybe")
        with pytest.raises(ConfigError, match=f"^environment variable {variable} must be true or false.*'maybe'"):
            config.load()
        monkeypatch.delenv(variable)


def test_numbers_set_to_nothing_take_their_default_and_bad_ones_name_the_variable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBED_TIMEOUT_S", "")
    monkeypatch.setenv("MAX_CONCURRENT_CALLS", " ")
    monkeypatch.setenv("METRICS_PORT", "")
    settings = config.load()
    assert (settings.embed_timeout, settings.max_concurrent_calls, settings.metrics_port) == (10.0, 256, None)
    monkeypatch.setenv("EMBED_TIMEOUT_S", "2.5")
    monkeypatch.setenv("METRICS_PORT", "0")
    assert (config.load().embed_timeout, config.load().metrics_port) == (2.5, 0)
    monkeypatch.setenv("EMBED_TIMEOUT_S", "soon")
    monkeypatch.setenv("MAX_CONCURRENT_CALLS", "many")
    with pytest.raises(ConfigError) as refused:
        config.load()
    assert set(str(refused.value).split("; ")) == {
        "environment variable MAX_CONCURRENT_CALLS must be an integer, got 'many'",
        "environment variable EMBED_TIMEOUT_S must be a number, got 'soon'"}


def test_a_choice_names_its_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBED_RUNTIME", "tensorrt")
    with pytest.raises(ConfigError, match="^environment variable EMBED_RUNTIME must be 'onnx' or 'torch', "
                                          "got 'tensorrt'$"):
        EmbedderSettings.load()
    monkeypatch.setenv("EMBED_RUNTIME", "torch")
    monkeypatch.setenv("MONGODB_TRANSACTIONS", "off")
    settings = EmbedderSettings.load()
    assert (settings.embed_runtime, settings.mongodb_transactions) == ("torch", "off")


def test_variables_are_read_by_their_exact_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("host", "10.0.0.1")  # a field's own name is no variable
    monkeypatch.setenv("ragmesh_host", "10.0.0.2")
    assert config.load().host == "127.0.0.1"
    monkeypatch.setenv("RAGMESH_HOST", "10.0.0.3")
    assert config.load().host == "10.0.0.3"
    monkeypatch.setenv("MONGODB_DB", "")  # a text set to nothing is nothing, not the default
    assert config.load().mongodb_db == ""


def test_gemini_key_falls_back_to_the_google_variable_only_when_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_API_KEY", "google")
    assert config.load().gemini_api_key == "google"
    monkeypatch.setenv("GEMINI_API_KEY", "")
    assert config.load().gemini_api_key == ""
    monkeypatch.setenv("GEMINI_API_KEY", "gemini")
    assert config.load().gemini_api_key == "gemini"
    assert config.load().replace(gemini_api_key="given").gemini_api_key == "given"  # a value given wins


def test_a_copy_is_checked_as_a_load_is() -> None:
    settings = config.load()
    assert settings.replace(embed_timeout="3").embed_timeout == 3.0
    with pytest.raises(ConfigError, match="EMBED_TIMEOUT_S must be a number"):
        settings.replace(embed_timeout="x")
    with pytest.raises(ConfigError, match="environment variable no_such_setting is not a setting"):
        settings.replace(no_such_setting=1)
    with pytest.raises(ValueError):
        settings.embed_timeout = 1.0  # type: ignore[misc]  # frozen: a service's settings do not move


def test_each_service_loads_its_own_model(monkeypatch: pytest.MonkeyPatch) -> None:
    assert {EmbedderApp.settings_model, RetrieverApp.settings_model, GeneratorApp.settings_model,
            GatewayApp.settings_model} == {EmbedderSettings, RetrieverSettings, GeneratorSettings, GatewaySettings}
    for model in config.SERVICE_MODELS.values():
        assert issubclass(model, ServiceSettings) and set(model.model_fields) <= set(Settings.model_fields)
    assert "redis_url" not in EmbedderSettings.model_fields and "embed_runtime" not in GatewaySettings.model_fields
    monkeypatch.setenv("REDIS_TIMEOUT_S", "soon")  # the gateway's alone: no reason for the embedder to stop
    assert EmbedderSettings.load().embed_runtime == "onnx"
    with pytest.raises(ConfigError, match="REDIS_TIMEOUT_S"):
        GatewaySettings.load()


def test_a_service_refuses_to_start_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBED_MAX_BATCH", "lots")
    with pytest.raises(SystemExit, match="^embedder: refusing to start: environment variable EMBED_MAX_BATCH "
                                         "must be an integer, got 'lots'$"):
        serving.main("embedder", EmbedderApp, lambda s: s.embedder_port)


def test_the_gemini_embedder_needs_its_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBED_BACKEND", "gemini")
    with pytest.raises(ConfigError, match="^EMBED_BACKEND=gemini needs GEMINI_API_KEY$"):
        EmbedderSettings.load()
    assert config.load().embed_backend == "gemini", "only the embedder needs it"
    monkeypatch.setenv("GOOGLE_API_KEY", "key")
    assert EmbedderSettings.load().gemini_api_key == "key"


def test_the_gateway_needs_allowed_hosts_on_a_public_bind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGMESH_HOST", "0.0.0.0")
    with pytest.raises(ConfigError, match="^ALLOWED_HOSTS must be set when the HTTP bridge binds 0.0.0.0"):
        GatewaySettings.load()
    assert config.load().host == "0.0.0.0", "the command line and the other services do not serve HTTP"
    assert RetrieverSettings.load().host == "0.0.0.0"
    monkeypatch.setenv("ALLOWED_HOSTS", "Gateway, ragmesh.example.com")
    assert GatewaySettings.load().allowed_host_names() == {"gateway", "ragmesh.example.com"}
    monkeypatch.setenv("ALLOWED_HOSTS", "*")
    assert GatewaySettings.load().allowed_host_names() is None
    monkeypatch.setenv("RAGMESH_HOST", "127.0.0.1")
    monkeypatch.setenv("ALLOWED_HOSTS", "")
    assert GatewaySettings.load().allowed_host_names() == {"127.0.0.1", "localhost", "::1"}


def test_tls_files_go_together(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TLS_CERT", "/certs/tls.crt")
    with pytest.raises(ConfigError, match="^TLS_CERT and TLS_KEY go together"):
        EmbedderSettings.load()
    monkeypatch.setenv("TLS_KEY", "/certs/tls.key")
    assert EmbedderSettings.load().tls_key == "/certs/tls.key"
    monkeypatch.setenv("TLS_CERT", "")
    monkeypatch.setenv("TLS_KEY", "")
    monkeypatch.setenv("TLS_CA", "/certs/ca.crt")
    with pytest.raises(ConfigError, match="^TLS_CA \\(mTLS\\) needs TLS_CERT and TLS_KEY"):
        config.load()


def test_milvus_settings_are_checked_only_when_milvus_is_the_backend(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    monkeypatch.setenv("MILVUS_CONSISTENCY", "sometimes")
    assert RetrieverSettings.load().retriever_backend == "memory"
    monkeypatch.setenv("RETRIEVER_BACKEND", "milvus")
    monkeypatch.setenv("MILVUS_URI", str(tmp_path / "index.db"))
    with pytest.raises(ConfigError, match="^MILVUS_CONSISTENCY must be one of Strong, Bounded, Session, Eventually"):
        RetrieverSettings.load()
    monkeypatch.setenv("MILVUS_CONSISTENCY", "bounded")
    monkeypatch.setenv("MILVUS_INDEX_TYPE", "hnsw")
    settings = RetrieverSettings.load()
    assert (settings.milvus_consistency, settings.milvus_index_type) == ("Bounded", "HNSW")  # Milvus's spelling
    monkeypatch.setenv("RETRIEVER_BACKEND", "elastic")
    with pytest.raises(ConfigError, match="RETRIEVER_BACKEND must be memory or milvus, got 'elastic'"):
        RetrieverSettings.load()


def test_describe_masks_secrets_and_credentials() -> None:
    described = config.load().replace(service_token="t0k", redis_url="redis://:pw@redis:6379/0",
                                      gemini_api_key="").describe()
    assert described["service_token"] == "***" and described["redis_url"] == "redis://redis:6379"
    assert described["gemini_api_key"] == "" and described["host"] == "127.0.0.1"
    assert set(described) == set(Settings.model_fields)


def test_configdoc_check_fails_on_a_stale_table_and_write_fixes_it(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture) -> None:
    doc = tmp_path / "operations.md"
    doc.write_text(f"# Operations\n\n{configdoc.START}\n| `OLD` | | |\n{configdoc.END}\n")
    assert configdoc.main(["--check", str(doc)]) == 1
    assert "stale" in capsys.readouterr().err
    assert configdoc.main(["--write", str(doc)]) == 0
    assert configdoc.main(["--check", str(doc)]) == 0
    assert "| `RAGMESH_HOST` | `127.0.0.1` |" in doc.read_text() and "`OLD`" not in doc.read_text()


def test_the_retriever_fuses_by_the_fusion_setting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DATA_DIR", str(tmp_path))
    assert RetrieverApp(RetrieverSettings.load()).engine.fusion == RetrieverSettings.load().fusion.upper()
    monkeypatch.setenv("FUSION", "dbsf")
    assert RetrieverApp(RetrieverSettings.load()).engine.fusion == "DBSF"
    monkeypatch.setenv("FUSION", "best")
    with pytest.raises(ConfigError, match="FUSION"):
        RetrieverSettings.load()
