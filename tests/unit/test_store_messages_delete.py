"""Store.delete_message on both backends: one message goes (a question stopped before any answer,
the stop button's flow), the others keep their order, and the next message still comes after them."""
from __future__ import annotations

from tests.unit.test_store_contract import Backend, backend  # noqa: F401 - the fixture, on every backend


def test_one_message_goes_and_the_rest_keep_their_order(backend: Backend) -> None:  # noqa: F811
    store = backend.open()
    store.ensure_conversation("t1", "u", "c1")
    store.ensure_conversation("t1", "u", "c2")
    ids = [store.add_message("c1", role, f"m{i}", {}) for i, role in enumerate(["user", "assistant", "user"])]
    other = store.add_message("c2", "user", "elsewhere", {})
    store.delete_message(ids[2])
    store.delete_message("no-such-message")  # nothing to delete: no error
    assert [m.content for m in store.messages("c1")] == ["m0", "m1"]
    later = store.add_message("c1", "user", "m3", {})
    assert [m.message_id for m in store.messages("c1")] == [ids[0], ids[1], later]
    assert [m.message_id for m in store.messages("c2")] == [other]
