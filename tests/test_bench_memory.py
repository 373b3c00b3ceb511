"""The bench's Redis memory per task (bench/memory.py)."""

from __future__ import annotations

import redis


class TestMemory:
    """The memory bench's arithmetic."""

    def test_a_full_event_log_adds_its_retention_whatever_the_tasks(self) -> None:
        from bench.memory import sizing_bytes  # noqa: PLC0415

        assert sizing_bytes(1_000_000, 100_000, 600.0, 120.0) == 612_000_000
        assert sizing_bytes(0, 100_000, 600.0, 120.0) == 12_000_000

    def test_facts_are_named_in_one_order_or_as_none(self) -> None:
        from bench.memory import facts_text  # noqa: PLC0415

        assert facts_text(frozenset({"times", "state"})) == "state, times"
        assert facts_text(frozenset()) == "none"

    def test_bytes_per_task_is_the_growth_over_the_tasks(self) -> None:
        from bench.harness import per_task  # noqa: PLC0415

        assert per_task(1_000, 51_000, 100) == 500.0

class TestMemorySettings:
    """The server setting the memory bench raises for one of its rows."""

    def test_the_hash_setting_is_raised_for_the_block_and_restored_on_any_redis(
        self, client: redis.Redis
    ) -> None:
        from bench.memory import listpack_values  # noqa: PLC0415

        # Redis 7 knows both names (the older as an alias); 6.2 only the ziplist one.
        name = "hash-max-ziplist-value"
        before = client.config_get(name)[name]
        with listpack_values(client, 300):
            assert client.config_get(name)[name] == "300"
        assert client.config_get(name)[name] == before
