"""Configuration: TOML + flags, validation messages, redaction."""

from __future__ import annotations

import pytest

from ticdc_delta.exceptions import ConfigError
from ticdc_delta.jobs import config

MINIMAL = {"kafka": {"topics": ["cdc"]}, "target": {"path": "/data/delta"}}


def write(tmp_path, text: str) -> str:
    path = tmp_path / "job.toml"
    path.write_text(text)
    return str(path)


def test_toml_then_flag_overrides(tmp_path):
    path = write(
        tmp_path,
        """
[kafka]
bootstrap_servers = "broker:9092"
topics = ["a", "b"]
group_id = "g1"
[kafka.properties]
"security.protocol" = "SASL_SSL"
"sasl.password" = "hunter2"
[target]
path = "/lake"
[run]
mode = "continuous"
""",
    )
    loaded = config.load(path, {"kafka": {"group_id": "g2", "topics": None}, "run": {"mode": "until-idle"}})
    assert loaded.kafka.bootstrap_servers == "broker:9092"
    assert loaded.kafka.topics == ("a", "b")
    assert loaded.kafka.group_id == "g2"
    assert loaded.run.mode == "until-idle"
    described = loaded.describe()
    assert described["kafka"]["properties"] == {"security.protocol": "SASL_SSL", "sasl.password": "***"}
    assert "hunter2" not in repr(described)


def test_registry_secrets_are_redacted():
    loaded = config.from_mapping(
        {
            **MINIMAL,
            "protocol": {"name": "avro"},
            "registry": {"url": "https://user%40corp:s%3Acret@registry:8081", "ssl_key_password": "pw"},
        }
    )
    described = loaded.describe()["registry"]
    assert described["url"] == "https://user%40corp:***@registry:8081"
    assert described["ssl_key_password"] == "***"
    assert "s%3Acret" not in repr(loaded.describe())


def test_the_configuration_objects_repr_holds_no_secret():
    # A repr reaches tracebacks, notebooks and debuggers; describe() is not the only way out.
    loaded = config.from_mapping(
        {
            "kafka": {"topics": ["cdc"], "properties": {"sasl.password": "kafka-pw"},
                      "java_properties": {"sasl.jaas.config": "jaas-pw"}},
            "target": {"path": "/data/delta"},
            "protocol": {"name": "avro"},
            "registry": {"url": "https://u:url-pw@registry:8081", "basic_auth_user_info": "u:auth-pw",
                         "ssl_key_password": "key-pw"},
            "spark": {"conf": {"spark.hadoop.fs.s3a.secret.key": "s3-pw", "spark.ui.enabled": "false"}},
        }
    )
    shown = repr(loaded)
    for secret in ("kafka-pw", "jaas-pw", "url-pw", "auth-pw", "key-pw", "s3-pw"):
        assert secret not in shown
    assert "'spark.ui.enabled': 'false'" in shown and "'sasl.password': '***'" in shown  # (the rest as it is)


def test_every_url_of_a_registry_failover_list_is_redacted():
    url = "https://a:first@r1:8081,https://b:second@r2:8081, http://r3:8081"
    loaded = config.from_mapping({**MINIMAL, "protocol": {"name": "avro"}, "registry": {"url": url}})
    described = loaded.describe()["registry"]["url"]
    assert described == "https://a:***@r1:8081,https://b:***@r2:8081, http://r3:8081"


def test_secrets_may_be_named_by_environment_variable_and_are_logged_as_the_reference(tmp_path, monkeypatch):
    # Setup: the SASL password, the registry's credentials and its key password, and a Spark setting, each
    # given as { env = "NAME" }; the variables set in the environment.
    # Expect: the values are the variables' text; the described configuration shows each reference, no value.
    monkeypatch.setenv("T_SASL_PASSWORD", "sasl-Pw-91")
    monkeypatch.setenv("T_REGISTRY_AUTH", "reader:reg-Pw-17")
    monkeypatch.setenv("T_KEY_PASSWORD", "key-Pw-33")
    monkeypatch.setenv("T_S3_SECRET", "s3-Pw-55")
    monkeypatch.setenv("T_GROUP", "from-env")
    path = write(tmp_path, """
[kafka]
topics = ["cdc"]
group_id = { env = "T_GROUP" }
[kafka.properties]
"sasl.password" = { env = "T_SASL_PASSWORD" }
[target]
path = "/lake"
[protocol]
name = "avro"
[registry]
url = "https://registry:8081"
basic_auth_user_info = { env = "T_REGISTRY_AUTH" }
ssl_key_password = { env = "T_KEY_PASSWORD" }
[spark.conf]
"spark.hadoop.fs.s3a.secret.key" = { env = "T_S3_SECRET" }
""")
    loaded = config.load(path)
    assert loaded.kafka.properties["sasl.password"] == "sasl-Pw-91"
    assert loaded.kafka.group_id == "from-env"
    assert loaded.registry.basic_auth_user_info == "reader:reg-Pw-17"
    assert loaded.registry.ssl_key_password == "key-Pw-33"
    assert loaded.spark.conf["spark.hadoop.fs.s3a.secret.key"] == "s3-Pw-55"
    described = loaded.describe()
    assert described["kafka"]["properties"]["sasl.password"] == {"env": "T_SASL_PASSWORD"}
    assert described["kafka"]["group_id"] == {"env": "T_GROUP"}
    assert described["registry"]["basic_auth_user_info"] == {"env": "T_REGISTRY_AUTH"}
    assert described["registry"]["ssl_key_password"] == {"env": "T_KEY_PASSWORD"}
    assert described["spark"]["conf"]["spark.hadoop.fs.s3a.secret.key"] == {"env": "T_S3_SECRET"}
    for value in ("sasl-Pw-91", "reg-Pw-17", "key-Pw-33", "s3-Pw-55"):
        assert value not in repr(described)


def test_an_unset_variable_is_a_configuration_error_naming_it(monkeypatch):
    monkeypatch.delenv("T_UNSET_PASSWORD", raising=False)
    values = {**MINIMAL, "kafka": {"topics": ["cdc"], "properties": {"sasl.password": {"env": "T_UNSET_PASSWORD"}}}}
    with pytest.raises(ConfigError, match=r"kafka\.properties\.sasl\.password: environment variable T_UNSET_PASSWORD is not set"):
        config.from_mapping(values)
    with pytest.raises(ConfigError, match="the name of an environment variable is required"):
        config.from_mapping({**MINIMAL, "target": {"path": {"env": ""}}})


def test_a_topic_pattern_reads_the_topics_whose_whole_name_matches_and_never_kafkas_own():
    # Expect: full match as Kafka's Java clients subscribe, `__` topics never, a listed topic only if listed.
    kafka = config.load(None, {**MINIMAL, "kafka": {"topic_pattern": "tidb_shop_.*"}}).kafka
    assert [t for t in ("tidb_shop_orders", "tidb_shop_", "x_tidb_shop_a", "tidb_sho") if kafka.reads(t)] == ["tidb_shop_orders", "tidb_shop_"]
    assert not config.load(None, {**MINIMAL, "kafka": {"topic_pattern": ".*"}}).kafka.reads("__consumer_offsets")
    listed = config.load(None, MINIMAL).kafka
    assert listed.reads("cdc") and not listed.reads("cdc2")


def test_a_command_line_flag_naming_topics_one_way_replaces_the_files_other_way(tmp_path):
    # Expect: --topic-pattern over a file's topics (and --topics over a file's pattern) is not "both set".
    path = tmp_path / "job.toml"
    path.write_text('[kafka]\ntopics = ["a"]\n[target]\npath = "/data"\n')
    from ticdc_delta.jobs.cli import _overrides, build_parser

    args = build_parser().parse_args(["run", "--config", str(path), "--topic-pattern", "tidb_.*"])
    loaded = config.load(str(path), _overrides(args)).kafka
    assert (loaded.topics, loaded.topic_pattern) == ((), "tidb_.*")
    path.write_text('[kafka]\ntopic_pattern = "x.*"\n[target]\npath = "/data"\n')
    args = build_parser().parse_args(["run", "--config", str(path), "--topics", "a,b"])
    loaded = config.load(str(path), _overrides(args)).kafka
    assert (loaded.topics, loaded.topic_pattern) == (("a", "b"), "")


def test_comma_separated_topics_from_the_command_line():
    loaded = config.load(None, {**MINIMAL, "kafka": {"topics": "a,b"}})
    assert loaded.kafka.topics == ("a", "b")


@pytest.mark.parametrize(
    "values, message",
    [
        ({**MINIMAL, "run": {"mode": "sometimes"}}, r"run.mode: 'sometimes' is not allowed; allowed: until-idle, continuous"),
        ({**MINIMAL, "policy": {"on_bad_message": "ignore"}}, r"policy.on_bad_message: 'ignore' is not allowed; allowed: fail, dead-letter"),
        ({**MINIMAL, "protocol": {"name": "canal"}}, r"protocol.name: 'canal' is not allowed; allowed: avro, canal-json, debezium, open-protocol, simple"),
        ({**MINIMAL, "protocol": {"encoding": "xml"}}, r"protocol.encoding: 'xml' is not allowed; allowed: json, avro"),
        ({**MINIMAL, "types": {"json": "bson"}}, r"types.json: 'bson' is not allowed; allowed: string, variant"),
        ({**MINIMAL, "types": {"jsn": "variant"}}, r"types.jsn: unknown key; allowed: bigint_unsigned, wide_decimal"),
        ({**MINIMAL, "kafka": {"topics": ["a"], "start_from": "middle"}}, r"kafka.start_from: 'middle' is not allowed; allowed: earliest, latest"),
        ({**MINIMAL, "kafka": {"topics": []}}, r"kafka.topics or kafka.topic_pattern: one is required"),
        ({**MINIMAL, "kafka": {"topics": ["a"], "topic_pattern": "b.*"}}, r"kafka.topics and kafka.topic_pattern are both set: keep one"),
        ({**MINIMAL, "kafka": {"topic_pattern": "tidb_(shop"}}, r"kafka.topic_pattern: 'tidb_\(shop' is not a regular expression: missing \)"),
        ({**MINIMAL, "kafka": {"topic_pattern": "t.*", "topic_refresh_seconds": 0}}, r"kafka.topic_refresh_seconds: must be a positive number, got 0"),
        ({**MINIMAL, "kafka": {"topics": ["a"], "topic": "b"}}, r"kafka.topic: unknown key; allowed: bootstrap_servers, topics, topic_pattern, topic_refresh_seconds, group_id, start_from, unreachable_timeout_seconds, properties"),
        ({**MINIMAL, "kafka": {"topics": ["a"], "properties": {"group.id": "x"}}}, r"kafka.properties: group.id is set by the product"),
        ({**MINIMAL, "target": {"path": "/a", "catalog": "main"}}, r"target: set exactly one of target.path"),
        ({**MINIMAL, "target": {}}, r"target: set exactly one of target.path"),
        ({**MINIMAL, "run": {"batch_max_seconds": 0}}, r"run.batch_max_seconds: must be a positive number, got 0"),
        ({**MINIMAL, "run": {"lease_seconds": "long"}}, r"run.lease_seconds: must be a positive number, got 'long'"),
        ({**MINIMAL, "run": {"lease_seconds": 0.5}}, r"run.lease_seconds: 0.5 is too short \(at least 2:"),
        ({**MINIMAL, "run": {"driver_decode_max_messages": -1}},
         r"run.driver_decode_max_messages: must be a whole number of at least 0, got -1"),
        ({**MINIMAL, "run": {"driver_decode_max_messages": True}},
         r"run.driver_decode_max_messages: must be a whole number of at least 0, got True"),
        ({**MINIMAL, "extra": {}}, r"extra: unknown section; allowed: kafka, target, protocol, run, policy, metrics, spark, types, registry"),
        ({"target": {"path": "/a"}}, r"kafka: section is required"),
        ({**MINIMAL, "protocol": {"name": "avro"}}, r"registry.url: required for protocol 'avro'"),
        ({**MINIMAL, "protocol": {"name": "avro", "avro_decimal_handling_mode": "exact"}, "registry": {"url": "http://r"}},
         r"protocol.avro_decimal_handling_mode: 'exact' is not allowed; allowed: precise, string"),
        ({**MINIMAL, "protocol": {"name": "avro", "avro_bigint_unsigned_handling_mode": "int"}, "registry": {"url": "http://r"}},
         r"protocol.avro_bigint_unsigned_handling_mode: 'int' is not allowed; allowed: long, string"),
        ({**MINIMAL, "protocol": {"name": "debezium", "enable_tidb_extension": "yes"}}, r"protocol.enable_tidb_extension: must be true or false"),
        ({**MINIMAL, "protocol": {"name": "canal-json", "enable_tidb_extension": True, "timestamp_zone": "Mars/Base"}},
         r"protocol.timestamp_zone: unknown time zone 'Mars/Base'"),
        # Each protocol takes only its own options, and says whose an option is.
        ({**MINIMAL, "protocol": {"avro_bigint_unsigned_handling_mode": "long"}},
         r"protocol.avro_bigint_unsigned_handling_mode: an option of avro, not of simple; allowed for simple: "
         r"large_message_compression, claim_check_root, claim_check_raw_value, encoding, schema_wait_seconds"),
        ({**MINIMAL, "protocol": {"name": "canal-json", "enable_tidb_extension": True, "encoding": "json"}},
         r"protocol.encoding: an option of simple, not of canal-json"),
        ({**MINIMAL, "protocol": {"name": "open-protocol", "schema_wait_seconds": 5}},
         r"protocol.schema_wait_seconds: an option of debezium, simple, not of open-protocol"),
        ({**MINIMAL, "protocol": {"name": "avro", "registry": {}}, "registry": {"url": "http://r"}},
         r"protocol.registry: unknown key; allowed for avro: avro_decimal_handling_mode"),
        ({**MINIMAL, "protocol": {"enconding": "json"}}, r"protocol.enconding: unknown key; allowed for simple:"),
        ({**MINIMAL, "protocol": "simple"}, r"protocol: must be a table, got str"),
        ({**MINIMAL, "protocol": {"name": ["simple"]}}, r"protocol.name: must be a protocol name, got \['simple'\]"),
        ({**MINIMAL, "registry": {"url": "http://r"}}, r"registry: only protocol 'avro' reads a schema registry; protocol.name is 'simple'"),
        ({**MINIMAL, "protocol": {"name": "open-protocol", "large_message_compression": "zstd"}},
         r"protocol.large_message_compression: 'zstd' is not allowed; allowed: none, lz4, snappy"),
        ({**MINIMAL, "registry": {"url": "ftp://r"}}, r"registry.url: 'ftp' URLs are not served; give an http:// or https:// URL"),
        ({**MINIMAL, "run": {"append_new_keys": True}, "policy": {"on_bad_message": "dead-letter"}},
         r"run.append_new_keys: a dead-lettered DELETE .* use policy.on_bad_message = 'fail' with it"),
        ({**MINIMAL, "run": {"append_new_keys": "yes"}}, r"run.append_new_keys: "),
        # Passthrough settings: a table of scalars (a string once read as an "unexpected error").
        ({**MINIMAL, "spark": {"conf": "{}"}}, r"spark.conf: must be a table of settings \(name = value\), got str"),
        ({**MINIMAL, "spark": {"conf": {"spark.x": {"y": 1}}}}, r"spark.conf.spark.x: must be a string, number or boolean, got dict"),
        ({**MINIMAL, "kafka": {"topics": ["a"], "properties": ["a"]}}, r"kafka.properties: must be a table of settings"),
        ({**MINIMAL, "kafka": {"topics": ["a"], "java_properties": {"x": [1]}}}, r"kafka.java_properties.x: must be a string, number or boolean, got list"),
    ],
)
def test_bad_config_names_key_and_allowed_values(values, message):
    with pytest.raises(ConfigError, match=message):
        config.from_mapping(values)


def test_passthrough_settings_are_strings_as_their_clients_spell_them():
    loaded = config.from_mapping({**MINIMAL, "spark": {"conf": {"a": 2, "b": True, "c": False, "d": 0.5, "e": "x"}},
                                  "kafka": {"topics": ["a"], "properties": {"fetch.wait.max.ms": 50, "queued.max.messages.kbytes": 1e6}}})
    assert loaded.spark.conf == {"a": "2", "b": "true", "c": "false", "d": "0.5", "e": "x"}
    assert loaded.kafka.properties == {"fetch.wait.max.ms": "50", "queued.max.messages.kbytes": "1000000"}


def test_unreadable_and_invalid_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        config.load(str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigError, match="is not valid TOML"):
        config.load(write(tmp_path, "[kafka\n"))


def test_watermark_less_protocols_need_the_extension_or_an_explicit_opt_in():
    with pytest.raises(ConfigError, match="protocol.enable_tidb_extension: canal-json sends watermarks only with"):
        config.from_mapping({**MINIMAL, "protocol": {"name": "canal-json"}})
    opted_in = config.from_mapping({**MINIMAL, "protocol": {"name": "debezium", "allow_offset_ordering": True}})
    assert opted_in.protocol.allow_offset_ordering


def test_table_features_default_to_tables_every_reader_opens():
    assert config.from_mapping(MINIMAL).target.table_features == "compatible"
    full = config.from_mapping({**MINIMAL, "target": {"path": "/lake", "table_features": "full"}})
    assert full.target.table_features == "full"
    assert full.describe()["target"]["table_features"] == "full"
    with pytest.raises(ConfigError, match=r"target.table_features: 'all' is not allowed; allowed: compatible, full"):
        config.from_mapping({**MINIMAL, "target": {"path": "/lake", "table_features": "all"}})


def test_small_merges_by_delta_rs_need_local_path_tables_of_the_compatible_layout():
    assert config.from_mapping(MINIMAL).target.small_merge_writer == "auto"
    chosen = {"path": "/lake", "small_merge_writer": "delta-rs"}
    assert config.from_mapping({**MINIMAL, "target": chosen}).target.small_merge_writer == "delta-rs"
    assert config.from_mapping({**MINIMAL, "target": {**chosen, "path": "file:///lake"}}).target.small_merge_writer
    refused = [
        ({**chosen, "path": "s3a://bucket/lake"}, "path tables on the local file system only"),
        ({"catalog": "main", "small_merge_writer": "delta-rs"}, "path tables on the local file system only"),
        ({**chosen, "table_features": "full"}, "tables of the compatible layout only"),
        ({**chosen, "small_merge_writer": "rust"}, "target.small_merge_writer: 'rust' is not allowed"),
    ]
    for target, why in refused:
        with pytest.raises(ConfigError, match=why):
            config.from_mapping({**MINIMAL, "target": target})


def test_small_merges_by_delta_rs_without_deltalake_installed_name_the_remedy(monkeypatch):
    import builtins
    import sys

    import deltalake

    imported = builtins.__import__

    def without_deltalake(name, *args, **kwargs):
        if name == "deltalake":
            raise ImportError("No module named 'deltalake'")
        return imported(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_deltalake)
    with pytest.raises(ConfigError, match=r"pip install 'ticdc-delta\[delta-rs\]'; or set it to \"auto\" or \"spark\""):
        config.from_mapping({**MINIMAL, "target": {"path": "/lake", "small_merge_writer": "delta-rs"}})
    # The default goes on with Spark's MERGE, saying so in one line.
    auto = config.from_mapping({**MINIMAL, "target": {"path": "/lake"}}).target
    assert "pip install" in auto.why_not_delta_rs()
    monkeypatch.setattr(builtins, "__import__", imported)
    # A release of deltalake other than those whose writes were checked: Spark's too, naming the versions.
    for version in ("1.5.2", "2.0.0"):
        monkeypatch.setattr(sys.modules["deltalake"], "__version__", version)
        assert f"deltalake {version} is installed" in auto.why_not_delta_rs()
    monkeypatch.setattr(deltalake, "__version__", "1.6.9")
    assert auto.why_not_delta_rs() is None


def test_the_default_small_merge_writer_is_delta_rs_where_it_can_be_used(caplog):
    from ticdc_delta.jobs.pipeline import small_merges_of

    def writer(target: dict):
        return small_merges_of(config.from_mapping({**MINIMAL, "target": target}).target)

    assert writer({"path": "/lake"}) is not None and writer({"path": "file:///lake"}) is not None
    with caplog.at_level("INFO", logger="ticdc_delta.jobs.pipeline"):
        assert writer({"path": "s3a://bucket/lake"}) is None and writer({"catalog": "main"}) is None
        assert writer({"path": "/lake", "table_features": "full"}) is None
    assert len([r for r in caplog.records if "small MERGEs are Spark's" in r.getMessage()]) == 3
    assert writer({"path": "/lake", "small_merge_writer": "spark"}) is None


def test_variant_columns_need_full_table_features():
    # Non-Spark readers read a VARIANT column as its binary encoding: not with tables meant for them.
    with pytest.raises(ConfigError, match=r"types.json: 'variant' needs target.table_features = 'full'"):
        config.from_mapping({**MINIMAL, "types": {"json": "variant"}})
    full = {**MINIMAL, "target": {"path": "/lake", "table_features": "full"}, "types": {"json": "variant"}}
    assert config.from_mapping(full).types.json == "variant"


def test_the_lease_lasts_a_minute_unless_set():
    assert config.from_mapping(MINIMAL).run.lease_seconds == 60
    assert config.from_mapping({**MINIMAL, "run": {"lease_seconds": 5}}).run.lease_seconds == 5
