"""Platform figures stay platform: Generator.Stats used to count every tenant's answers for any
tenant's admin (how busy the others are, when they ask). Now a tenant's caller sees its tenant's
counts; the whole deployment's only the service credential naming no tenant does."""
from __future__ import annotations

from ragmesh.identity.authenticator import service_token
from ragmesh.v1 import generator_pb2, generator_pb2_grpc
from tests.auth import bearer, channel
from tests.stack import Stack


def stats(stack: Stack, metadata) -> tuple[int, int]:
    with channel(stack.address("generator"), metadata) as ch:
        reply = generator_pb2_grpc.GeneratorStub(ch).Stats(generator_pb2.GeneratorStatsRequest(), timeout=30)
    return reply.started, reply.completed


def answer(stack: Stack, metadata) -> None:
    request = generator_pb2.GenerateRequest(model="extractive", question="What is Kestrel?",
                                            blocks=[generator_pb2.ContextBlock(index=1, text="Kestrel is a fund.")])
    with channel(stack.address("generator"), metadata) as ch:
        list(generator_pb2_grpc.GeneratorStub(ch).Generate(request, timeout=60))


def test_another_tenants_answers_are_not_counted_for_a_tenants_admin(stack: Stack) -> None:
    victim = stack.service_metadata("figures-victim")  # the gateway answering for the victim's users
    spy = bearer(stack.key("figures-spy", "spy-admin", "admin"))  # an operator key of another tenant
    platform = bearer(service_token(stack.settings))  # the service credential, for no tenant
    spy_before, everyone_before = stats(stack, spy), stats(stack, platform)
    for _ in range(3):
        answer(stack, victim)
    assert stats(stack, spy) == spy_before, "the spy's admin key sees the victim's answers being counted"
    assert stats(stack, victim) == (3, 3), "the victim's own figures"
    assert stats(stack, platform) == (everyone_before[0] + 3, everyone_before[1] + 3)
    answer(stack, spy)
    assert stats(stack, spy) == (spy_before[0] + 1, spy_before[1] + 1)
