"""The ``headrace`` command line (entry point ``main``).

Exit status: 0 on success, 1 when a command fails (the message goes to stderr, without a
traceback), 2 for a usage error. Client commands reach the broker only through Kafka clients
(confluent-kafka; kafka-python for the transaction APIs librdkafka lacks); ``broker`` and
``demo`` start a broker and import it lazily, so the client commands never pay for loading it.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from headrace.cli.terminal import (
    BootstrapServers,
    ClientConfig,
    plural,
    print_error,
    stderr,
    stdout,
)
from headrace.errors import HeadraceError
from headrace.ops.clients import (
    DEFAULT_BOOTSTRAP_SERVERS,
    parse_client_settings,
    set_client_settings,
    show_client_logs,
)
from headrace.ops.consume import ConsumeOptions, consume
from headrace.ops.errors import InvalidInputError, OpsError, VerificationError
from headrace.ops.produce import ProduceOptions, produce_lines
from headrace.ops.topics import parse_configs

app = typer.Typer(
    name="headrace",
    help="headrace: a Kafka-protocol log broker, and tools that talk to any Kafka broker.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


# The commands of their own modules (name -> the ``headrace.cli`` module, and the function of
# it that is the command, or None for the module's Typer app, a group of commands). Each is
# added when it is the one run (``main``): a broker start or a client command then imports
# its own module only, not every command's Kafka clients and tables (a third of the CPU of
# a short command's process).
_COMMAND_MODULES: dict[str, tuple[str, str | None]] = {
    "topics": ("topics", None), "groups": ("groups", None),
    "transactions": ("transactions", None), "schemas": ("registry", None),
    "cdc": ("cdc", None), "bank": ("bank", None), "users": ("users", None),
    "acls": ("acls", None), "savepoint": ("savepoint", None), "cluster": ("cluster", None),
    "registry": ("registry", "registry"), "capacity": ("capacity", "capacity"),
    "console": ("console", "console"),
}
# the root options that take a value (the command name comes after them)
_ROOT_VALUE_OPTIONS = frozenset({"--client-config", "-X", "--command-config"})


class Acks(StrEnum):
    """Acknowledgements a produce waits for (Kafka's ``acks``)."""

    ALL = "all"
    LEADER = "1"
    NONE = "0"


@app.callback()
def _root(
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Show the Kafka client's own log on stderr.")
    ] = False,
    client_config: Annotated[
        list[str] | None, typer.Option(
            "--client-config", "-X", metavar="KEY=VALUE",
            help="A setting for every Kafka client the command makes, by librdkafka's name "
            "(security.protocol=SASL_SSL, sasl.mechanism=SCRAM-SHA-512, sasl.username=..., "
            "ssl.ca.location=ca.pem); repeatable.")
    ] = None,
    command_config: Annotated[
        Path | None, typer.Option(
            envvar="HEADRACE_COMMAND_CONFIG", dir_okay=False, exists=True,
            help="A properties file of such settings (key=value lines); -X wins over it.")
    ] = None,
) -> None:
    if verbose:
        show_client_logs()
    try:
        set_client_settings(parse_client_settings(
            client_config or [], command_config.read_text() if command_config else ""))
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="'--client-config'/'--command-config'") from e


@app.command()
def broker(
    data_dir: Annotated[
        Path,
        typer.Option("--data-dir", file_okay=False, help="Directory holding the topic logs."),
    ],
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="Port to listen on; 0 picks a free one.")
    ] = 9092,
    auto_create_topics: Annotated[
        bool,
        typer.Option(
            "--auto-create-topics/--no-auto-create-topics",
            help="Create a topic when a client asks for one that does not exist.",
        ),
    ] = True,
    num_partitions: Annotated[
        int, typer.Option(min=1, help="Partitions of a topic created without a count.")
    ] = 1,
    fsync: Annotated[
        bool, typer.Option("--fsync", help="fsync the log before acknowledging a produce.")
    ] = False,
    node_id: Annotated[int, typer.Option(min=0, help="This broker's Kafka node id.")] = 0,
    log_level: Annotated[
        str,
        typer.Option(help="Logging level: DEBUG (shows each partition fsync), INFO, WARNING."),
    ] = "INFO",
    advertised_host: Annotated[
        str | None,
        typer.Option(help="Host name clients are told to connect to (default: --host)."),
    ] = None,
    segment_bytes: Annotated[
        int | None,
        typer.Option(min=14, help="Roll a log segment after this many bytes (default: 1 GiB)."),
    ] = None,
    config: Annotated[
        list[str] | None,
        typer.Option(
            "--config",
            "-c",
            metavar="NAME=VALUE",
            help="Default of a topic config for every topic, by Kafka's broker name "
            "(log.retention.ms=3600000, log.cleanup.policy=compact) or topic name, a "
            "listener's listener.name.<name>.ssl.client.auth, or "
            "transaction.partition.verification.enable; repeatable.",
        ),
    ] = None,
    log_cleaner: Annotated[
        bool,
        typer.Option("--log-cleaner/--no-log-cleaner", help="Compact topics with "
                     "cleanup.policy=compact in the background (log.cleaner.enable)."),
    ] = True,
    log_cleaner_backoff_ms: Annotated[
        int, typer.Option(min=1, help="Pause of the log cleaner when no log needs cleaning.")
    ] = 15_000,
    log_cleaner_dedupe_buffer_size: Annotated[
        int, typer.Option(min=1024, help="Approximate memory bound of one cleaning pass's "
                          "key map, in bytes.")
    ] = 128 * 1024 * 1024,
    log_retention_check_interval_ms: Annotated[
        int, typer.Option(min=1, help="How often retention deletes expired segments.")
    ] = 30_000,
    group_consumer_session_timeout_ms: Annotated[
        int, typer.Option(min=1, help="Session timeout of KIP-848 consumer group members "
                          "(group.consumer.session.timeout.ms).")
    ] = 45_000,
    group_consumer_heartbeat_interval_ms: Annotated[
        int, typer.Option(min=1, help="Heartbeat interval told to KIP-848 consumer group "
                          "members (group.consumer.heartbeat.interval.ms).")
    ] = 5_000,
    offsets_retention_minutes: Annotated[
        float, typer.Option(min=0.001, help="Delete a group's committed offsets this long after "
                            "it became empty; standalone commits this long after the commit "
                            "(offsets.retention.minutes).")
    ] = 7 * 24 * 60,
    offsets_retention_check_interval_ms: Annotated[
        int, typer.Option(min=1, help="How often committed offsets are checked for expiry "
                          "(offsets.retention.check.interval.ms).")
    ] = 600_000,
    schema_registry_port: Annotated[
        int | None, typer.Option(min=0, max=65535, help="Also run a schema registry on this "
                                 "HTTP port (its schemas in this broker's _schemas topic).")
    ] = None,
    metrics_port: Annotated[
        int | None, typer.Option(min=0, max=65535, help="Serve Prometheus metrics on this "
                                 "HTTP port (GET /metrics); 0 picks a free one.")
    ] = None,
    listener: Annotated[
        list[str] | None, typer.Option(help="A listener NAME://HOST:PORT (repeatable; "
                                       "replaces --host/--port). PLAINTEXT, SSL, "
                                       "SASL_PLAINTEXT and SASL_SSL are served. "
                                       "'NAME://HOST:PORT?ssl.client.auth=required' sets the "
                                       "listener's own client authentication.")
    ] = None,
    listener_security_protocol_map: Annotated[
        str, typer.Option(help="NAME:PROTOCOL,... for listeners not named after their "
                          "protocol (listener.security.protocol.map).")
    ] = "",
    ssl_keystore_location: Annotated[
        str, typer.Option(help="PEM file with the broker's private key and certificate chain "
                          "(ssl.keystore.location, type PEM).")
    ] = "",
    ssl_truststore_location: Annotated[
        str, typer.Option(help="PEM file of the CAs client certificates must chain to.")
    ] = "",
    ssl_client_auth: Annotated[
        str, typer.Option(help="none, requested or required (ssl.client.auth), for SSL "
                          "listeners (KIP-684: not SASL_SSL ones; a listener's own setting "
                          "overrides it).")
    ] = "none",
    ssl_handshake_timeout: Annotated[
        float, typer.Option(min=0.1, help="Seconds a client has to finish the TLS handshake.")
    ] = 10.0,
    authorizer: Annotated[
        bool, typer.Option("--authorizer", help="Enforce ACLs on every API (Kafka's "
                           "authorizer.class.name): deny what no ACL allows.")
    ] = False,
    super_users: Annotated[
        str, typer.Option(help="Principals allowed everything, 'User:admin;User:ops' "
                          "(super.users).")
    ] = "",
    connections_max_reauth_ms: Annotated[
        int, typer.Option(min=0, help="SASL logins expire after this long; clients must "
                          "re-authenticate (KIP-368, connections.max.reauth.ms; 0: never).")
    ] = 0,
    allow_everyone_if_no_acl_found: Annotated[
        bool, typer.Option("--allow-everyone-if-no-acl-found", help="Allow an operation on a "
                           "resource no ACL names (allow.everyone.if.no.acl.found).")
    ] = False,
) -> None:
    """Run a broker in the foreground until Ctrl-C (SIGINT) or SIGTERM."""
    from dataclasses import replace

    from headrace.broker.config import BrokerConfig
    from headrace.broker.errors import BrokerConfigError
    from headrace.broker.groups.consumer_coordinator import ConsumerGroupConfig
    from headrace.broker.listeners import (
        SslConfig,
        listener_client_auth,
        parse_listeners,
        server_context,
    )
    from headrace.broker.security.acls import AuthorizerConfig, parse_super_users
    from headrace.broker.server import run
    from headrace.broker.txn.coordinator import VERIFICATION_CONFIG, TxnConfig
    from headrace.storage.cleaner import CleanerConfig
    from headrace.storage.config import LogConfig, broker_log_config
    from headrace.storage.remote_config import BROKER_NAMES, remote_log_config

    log = LogConfig(flush_on_ack=fsync)
    if segment_bytes is not None:
        log = replace(log, segment_bytes=segment_bytes)
    try:
        listener_auth, topic_defaults = listener_client_auth(parse_configs(config or []))
        verification = topic_defaults.pop(VERIFICATION_CONFIG, "true").strip().lower()
        if verification not in ("true", "false"):
            raise ValueError(f"{VERIFICATION_CONFIG} must be true or false")
        remote = remote_log_config({name: topic_defaults.pop(name)
                                    for name in list(topic_defaults) if name in BROKER_NAMES})
        log = broker_log_config(topic_defaults, log)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="'--config'") from e
    cleaner = CleanerConfig(enabled=log_cleaner, backoff_ms=log_cleaner_backoff_ms,
                            dedupe_buffer_size=log_cleaner_dedupe_buffer_size)
    broker_config = BrokerConfig(
        data_dir=data_dir,
        host=host,
        port=port,
        advertised_host=advertised_host,
        node_id=node_id,
        auto_create_topics=auto_create_topics,
        num_partitions=num_partitions,
        log_level=log_level.upper(),
        log=log,
        cleaner=cleaner,
        retention_check_interval_ms=log_retention_check_interval_ms,
        offsets_retention_ms=round(offsets_retention_minutes * 60_000),
        offsets_retention_check_interval_ms=offsets_retention_check_interval_ms,
        consumer_groups=ConsumerGroupConfig(
            session_timeout_ms=group_consumer_session_timeout_ms,
            heartbeat_interval_ms=group_consumer_heartbeat_interval_ms),
        metrics_port=metrics_port,
        ssl=SslConfig(ssl_keystore_location, ssl_truststore_location, ssl_client_auth,
                      ssl_handshake_timeout),
        authorizer=AuthorizerConfig(authorizer, parse_super_users(super_users),
                                    allow_everyone_if_no_acl_found),
        connections_max_reauth_ms=connections_max_reauth_ms,
        txns=TxnConfig(partition_verification=verification == "true"),
        remote=remote,
    )
    try:
        listeners = parse_listeners(listener or [], listener_security_protocol_map,
                                    listener_auth)
        for x in listeners:  # a bad key or CA file fails here, clearly
            if x.uses_tls:
                server_context(broker_config.ssl, x.client_auth(ssl_client_auth))
    except BrokerConfigError as e:
        raise typer.BadParameter(str(e), param_hint="'--listener'/'--ssl-*'") from e
    if listeners:
        broker_config = replace(broker_config, listeners=listeners)
    children: list[subprocess.Popen[bytes]] = []

    def start_registry(broker_port: int) -> None:
        if schema_registry_port is not None:
            from headrace.cli import registry

            children.append(registry.spawn_registry(
                f"{host}:{broker_port}", host, schema_registry_port))

    try:
        run(broker_config, on_listening=start_registry)
    except OSError as e:
        raise OpsError(f"the broker could not start on {host}:{port}: {e}") from e
    finally:
        for child in children:
            child.terminate()
            child.wait(10)


@app.command()
def produce(
    topic: Annotated[str, typer.Argument(help="Topic to produce to.", show_default=False)],
    key_separator: Annotated[
        str | None,
        typer.Option(
            help="Split each line at the first SEP into key and value (default: no keys).",
            metavar="SEP",
        ),
    ] = None,
    partition: Annotated[
        int | None,
        typer.Option(
            "--partition", "-p", min=0, help="Produce to this partition (default: by key)."
        ),
    ] = None,
    acks: Annotated[
        Acks, typer.Option(help="Acknowledgements to wait for: all replicas, leader, none.")
    ] = Acks.ALL,
    bootstrap_servers: BootstrapServers = DEFAULT_BOOTSTRAP_SERVERS,
    client_config: ClientConfig = None,
) -> None:
    """Produce one record per line of stdin.

    Keyed records are partitioned with Kafka's murmur2 partitioner, as a Java client would.
    Exits 1 if any record was not delivered.
    """
    if key_separator == "":
        raise typer.BadParameter("must not be empty", param_hint="'--key-separator'")
    if sys.stdin.isatty():
        stderr.print("Reading records from stdin, one per line; end with Ctrl-D.")
    options = ProduceOptions(
        bootstrap_servers=bootstrap_servers,
        topic=topic,
        key_separator=key_separator.encode() if key_separator is not None else None,
        partition=partition,
        acks=acks.value,
    )
    result = produce_lines(sys.stdin.buffer, options)
    spread = ", ".join(f"{p}: {n}" for p, n in result.per_partition.items())
    stdout.print(
        f"Produced {plural(result.records, 'record')} to {escape(topic)}"
        + (f" (per partition {spread})" if spread else "")
        + "."
    )


@app.command(name="consume")
def consume_command(
    topic: Annotated[str, typer.Argument(help="Topic to read.", show_default=False)],
    from_beginning: Annotated[
        bool,
        typer.Option("--from-beginning", help="Start at the oldest record (default: the end)."),
    ] = False,
    partition: Annotated[
        int | None,
        typer.Option("--partition", "-p", min=0, help="Read only this partition."),
    ] = None,
    offset: Annotated[
        int | None, typer.Option(min=0, help="Start at this offset (needs --partition).")
    ] = None,
    max_messages: Annotated[
        int | None, typer.Option("--max-messages", "-n", min=1, help="Stop after N records.")
    ] = None,
    group: Annotated[
        str | None,
        typer.Option(
            "--group", "-g", help="Consume as a member of this group and commit its offsets."
        ),
    ] = None,
    print_key: Annotated[
        bool, typer.Option("--print-key", help="Print KEY SEP VALUE instead of VALUE.")
    ] = False,
    key_separator: Annotated[
        str,
        typer.Option(
            help="Separator after the key with --print-key (default: tab).",
            metavar="SEP",
            show_default=False,
        ),
    ] = "\t",
    timeout: Annotated[
        float | None,
        typer.Option(min=0.0, help="Stop after SECONDS without a record (default: never)."),
    ] = None,
    bootstrap_servers: BootstrapServers = DEFAULT_BOOTSTRAP_SERVERS,
    client_config: ClientConfig = None,
) -> None:
    """Print the records of a topic on stdout, one value per line.

    Without --group the consumer assigns partitions itself: no group, no committed offsets.
    With --group it subscribes, starts where the group left off, and commits the offsets of
    records once they are printed (at least once: after a crash a record may print twice).
    A null key or value prints as "null". Runs until Ctrl-C unless --max-messages or
    --timeout stops it first; the count goes to stderr.
    """
    try:
        options = ConsumeOptions(
            bootstrap_servers=bootstrap_servers,
            topic=topic,
            from_beginning=from_beginning,
            partition=partition,
            offset=offset,
            max_messages=max_messages,
            group=group,
            print_key=print_key,
            key_separator=key_separator.encode(),
            idle_timeout=timeout,
        )
    except InvalidInputError as e:
        raise typer.BadParameter(str(e)) from e
    count = consume(options, sys.stdout.buffer)
    stderr.print(f"Consumed {plural(count, 'record')}.")


@app.command()
def demo(
    scenario: Annotated[
        str, typer.Argument(help="fraud (Spark pipeline, the default), bank (event "
                                 "sourcing and CQRS) or payments (broker round trip only).")
    ] = "fraud",
    rate: Annotated[
        float, typer.Option("--rate", min=1, help="fraud: transactions per second.")
    ] = 200.0,
    duration: Annotated[
        float, typer.Option("--duration", min=5, help="fraud: seconds of generated traffic.")
    ] = 40.0,
    records: Annotated[
        int, typer.Option("--records", "-n", min=1, help="payments: payments to produce.")
    ] = 5000,
    partitions: Annotated[
        int, typer.Option(min=1, help="payments: partitions of the demo topic.")
    ] = 3,
    topic: Annotated[str, typer.Option(help="payments: topic to use.")] = "demo-payments",
    engine: Annotated[
        str, typer.Option("--engine", help="fraud: realtime (Spark Real-Time Mode, checked by "
                                           "the micro-batch pipeline) or microbatch.")
    ] = "realtime",
    checkpoint_interval: Annotated[
        str, typer.Option("--checkpoint-interval",
                          help="fraud, realtime: Real-Time Mode's checkpoint interval (at "
                               "least 5 s); each checkpoint boundary delays alerts for a few "
                               "seconds.")
    ] = "5 minutes",
    bootstrap_servers: Annotated[
        str | None,
        typer.Option(
            "--bootstrap-servers",
            "-b",
            help="Use this running broker instead of starting an embedded one.",
        ),
    ] = None,
) -> None:
    """Run a demo. fraud: an embedded broker, a generator of card transactions with
    injected fraud, and the Spark detection pipelines (the real-time path, checked by the
    micro-batch one), with a live view and a summary (precision, recall, detection latency). payments: write card payments, read them back
    and verify them."""
    if scenario == "payments":
        from headrace.ops.demo import DemoSettings, run_demo
        from headrace.ops.demo_report import render_report

        settings = DemoSettings(records=records, partitions=partitions, topic=topic)
        report = run_demo(settings, bootstrap_servers, progress=stderr.print)
        stdout.print(render_report(report))
        if report.problems:
            raise VerificationError("verification failed: " + "; ".join(report.problems))
        return
    if scenario == "bank":
        from headrace.pipelines.bank.demo import run_bank_demo

        bank = run_bank_demo(bootstrap_servers, stderr.print)
        stdout.print(bank.render())
        if bank.problems:
            raise VerificationError("verification failed: " + "; ".join(bank.problems))
        return
    if scenario != "fraud":
        raise typer.BadParameter(f"unknown demo {scenario!r}: fraud, bank or payments")
    if engine not in ("realtime", "microbatch"):
        raise typer.BadParameter(f"unknown engine {engine!r}: realtime or microbatch")
    from headrace.pipelines.fraud.live import LiveSettings, run_live
    from headrace.pipelines.fraud.realtime import checkpoint_interval_ms

    checkpoint_interval_ms(checkpoint_interval)
    summary = run_live(LiveSettings(rate=rate, duration_s=duration,
                                    engine="realtime" if engine == "realtime" else "microbatch",
                                    bootstrap_servers=bootstrap_servers,
                                    checkpoint_interval=checkpoint_interval), stderr)
    stdout.print(summary.render())


def command_name(args: list[str]) -> str | None:
    """The command ``args`` (the arguments after ``headrace``) run: the first argument
    after the root options; None when there is none (``--help``, no arguments)."""
    it = iter(args)
    for arg in it:
        if arg in _ROOT_VALUE_OPTIONS:
            next(it, None)
        elif not arg.startswith("-"):
            return arg
    return None


def add_commands(name: str | None) -> None:
    """Add the commands of their own modules to ``app``: the one called ``name`` when it
    is one of them, none when ``name`` is one of ``app``'s own (``broker``, ``produce``
    ...), else all (root help, a misspelt name: the listing and the hint name every
    command). Call once per process."""
    own = {c.name or c.callback.__name__.replace("_", "-")
           for c in app.registered_commands if c.callback is not None}
    if name in own:
        return
    names = [name] if name in _COMMAND_MODULES else list(_COMMAND_MODULES)
    for command in names:
        module_name, function = _COMMAND_MODULES[command]
        module = importlib.import_module(f"headrace.cli.{module_name}")
        if function is None:
            app.add_typer(module.app)
        else:
            app.command(command)(getattr(module, function))


def main() -> None:
    """Run the CLI; a ``HeadraceError`` becomes a one-line message on stderr and exit 1."""
    add_commands(command_name(sys.argv[1:]))
    try:
        app(prog_name="headrace")
    except HeadraceError as e:
        print_error(str(e))
        sys.exit(1)
