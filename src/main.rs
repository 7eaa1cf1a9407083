//! The `taskgate` command.

/// The terminal client (`taskgate call`, `taskgate tasks`): beside the server,
/// importing none of it but the header names in `taskgate::rpc::header`.
mod cli;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand, ValueEnum};

/// The process allocator: mimalloc. A tasks/get makes a few hundred small,
/// short-lived allocations (parsed JSON, the reply, the run's records); with
/// the C library's allocator they were about a quarter of its instructions
/// (`scripts/profile.sh`). The feature `system-allocator` leaves the C
/// library's in place, for heap profilers.
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// taskgate: run existing pipelines as long-running MCP tools.
#[derive(Parser)]
#[command(name = "taskgate", version, about)]
struct Cli {
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true, env = "TASKGATE_LOG_FORMAT")]
    log_format: LogFormat,
    /// Where audit events (target `taskgate::audit`) go: `stderr` (the
    /// default, beside the log, in its format), a file path (JSON lines,
    /// appended; created with mode 0600), or `off`. `TASKGATE_LOG` does not
    /// select or silence them: they have this sink of their own. Reads and
    /// front-door refusals are written a serving thread's batch at a time
    /// (see docs/operating.md).
    #[arg(
        long,
        value_name = "stderr|PATH|off",
        default_value = "stderr",
        global = true,
        env = "TASKGATE_AUDIT_LOG"
    )]
    audit_log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Serve MCP over Streamable HTTP (default) or stdio.
    Serve {
        /// The config file.
        #[arg(long, short, env = "TASKGATE_CONFIG", default_value = "taskgate.toml")]
        config: PathBuf,
        /// Serve one client on stdin/stdout instead of HTTP.
        #[arg(long)]
        stdio: bool,
        /// Override server.listen.
        #[arg(long)]
        listen: Option<std::net::SocketAddr>,
    },
    /// Validate the config, then probe each engine and tool target.
    CheckConfig {
        /// The config file.
        #[arg(long, short, env = "TASKGATE_CONFIG", default_value = "taskgate.toml")]
        config: PathBuf,
    },
    /// Ask the configured engines which pipelines they already run and print
    /// them as `[[tools]]` entries to append to the config.
    #[command(after_help = cli::discover::EXIT_CODES)]
    Discover(cli::discover::DiscoverArgs),
    /// Print the tool catalog as clients see it (2026-07-28 tools/list).
    Tools {
        /// The config file.
        #[arg(long, short, env = "TASKGATE_CONFIG", default_value = "taskgate.toml")]
        config: PathBuf,
        /// Show what this caller sees: a static token's caller (with its scopes and
        /// groups), `local` for the stdio caller, or any identity (`ISSUER#SUB`).
        #[arg(long = "as", value_name = "CALLER")]
        as_caller: Option<String>,
        /// Scopes the caller holds (added to a static caller's own); repeatable.
        #[arg(long = "scope", value_name = "SCOPE")]
        scopes: Vec<String>,
        /// Groups the caller is in (added to a static caller's own); repeatable.
        #[arg(long = "group", value_name = "GROUP")]
        groups: Vec<String>,
    },
    /// Call a tool from a terminal: start the task, show its progress, ask its
    /// questions, print its result.
    #[command(after_help = cli::EXIT_CODES)]
    Call(cli::CallArgs),
    /// Read, follow or cancel a task by its handle.
    #[command(after_help = cli::EXIT_CODES)]
    Tasks {
        #[command(subcommand)]
        command: cli::TasksCommand,
    },
    /// Print the entry an AI host (Claude Desktop, Claude Code, VS Code,
    /// Cursor, or any `mcpServers` host) needs to use taskgate: spawning
    /// `taskgate serve --stdio` on a config, or reaching a running server at
    /// `--url` with its token read from an environment variable by the host.
    HostConfig(cli::host_config::HostConfigArgs),
    /// Print a fresh sealing secret (the base64 text of 32 random bytes) for
    /// `[keys]`: `export TASKGATE_SEAL_KEY="$(taskgate keygen)"`, or write it to
    /// the file a key's `secret_file` names.
    Keygen,
    /// Internal: the exec engine's detached run supervisor.
    #[cfg(feature = "exec")]
    #[command(hide = true)]
    Supervise {
        /// Arguments for the supervisor.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
}

/// Whether log lines on stderr carry ANSI colour: text logs only, only when
/// stderr is a terminal (not a file, a pipe or a pod's log), and never when
/// `NO_COLOR` is set to a non-empty value (no-color.org). JSON logs never do.
fn colour_on_stderr(format: LogFormat) -> bool {
    use std::io::IsTerminal as _;
    matches!(format, LogFormat::Text)
        && std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// The log on stderr, filtered by `TASKGATE_LOG` (default `info`), and the
/// audit trail in its own sink, which that filter does not touch: every event
/// of `taskgate::audit` at `info` goes there, and only there. Colour only as
/// [`colour_on_stderr`] decides. With `telemetry` (tracing on), spans go to
/// its exporter too, and JSON log lines written inside a traced span carry its
/// `trace_id` and `span_id`. The spans made for traces (target
/// `taskgate::trace`) are never log fields.
fn init_logs(
    format: LogFormat,
    audit_log: &str,
    telemetry: Option<&taskgate::telemetry::Telemetry>,
) -> Result<(), String> {
    use tracing_subscriber::filter::{filter_fn, FilterExt as _, Targets};
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::Layer as _;

    type Boxed = Box<dyn tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync>;
    let audit_target = taskgate::core::audit::TARGET;
    let filter = tracing_subscriber::EnvFilter::try_from_env("TASKGATE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let not_audit = filter_fn(move |m| m.target() != audit_target);
    let not_traced = filter_fn(|m| !m.target().starts_with(taskgate::telemetry::TARGET));
    let ansi = colour_on_stderr(format);
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let logs: Boxed = match format {
        LogFormat::Text => logs
            .with_filter(filter.and(not_audit).and(not_traced))
            .boxed(),
        LogFormat::Json if telemetry.is_some() => logs
            .json()
            .map_event_format(taskgate::telemetry::WithTraceIds)
            .with_filter(filter.and(not_audit).and(not_traced))
            .boxed(),
        LogFormat::Json => logs
            .json()
            .with_filter(filter.and(not_audit).and(not_traced))
            .boxed(),
    };
    // Audit lines are written by taskgate's own sink (one line per event,
    // straight from the event: every read is audited, so this is on the path
    // of every `tasks/get`), in the log's layout; through tracing's formatter
    // only to colour them on a terminal.
    use taskgate::core::audit::{sink, LineFormat};
    let line_format = match format {
        LogFormat::Text => LineFormat::Text,
        LogFormat::Json => LineFormat::Json,
    };
    let only_audit = Targets::new().with_target(audit_target, tracing::Level::INFO);
    let (audit_sink, audit): (sink::Sink, Option<Boxed>) = match audit_log {
        "off" => (sink::Sink::Off, None),
        "stderr" | "" if ansi => (
            sink::Sink::Tracing,
            Some(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_ansi(true)
                    .with_filter(only_audit)
                    .boxed(),
            ),
        ),
        "stderr" | "" => (
            sink::Sink::lines(line_format, Box::new(std::io::stderr())),
            None,
        ),
        path => {
            use std::os::unix::fs::OpenOptionsExt as _;
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(path)
                .map_err(|e| format!("cannot open the audit log {path} (--audit-log): {e}"))?;
            (sink::Sink::lines(LineFormat::Json, Box::new(file)), None)
        }
    };
    if sink::install(audit_sink).is_err() {
        return Err("the audit sink was installed twice".to_owned());
    }
    tracing_subscriber::registry()
        .with(
            vec![
                Some(logs),
                audit,
                telemetry.map(taskgate::telemetry::Telemetry::layer),
            ]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>(),
        )
        .init();
    if audit_log == "off" {
        tracing::warn!("the audit trail is off (--audit-log off): starts, reads, cancels, answers and refusals are not recorded");
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    #[cfg(feature = "exec")]
    if let Command::Supervise { args } = &cli.command {
        return taskgate_exec::supervise_main(args);
    }
    if let Command::Keygen = &cli.command {
        println!("{}", taskgate::core::handle::new_secret());
        return ExitCode::SUCCESS;
    }
    // rustls' one crypto provider in this build is aws-lc-rs (the handles'
    // cipher library); installing it names it for every TLS client in the
    // process, whatever features a dependency turned on.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let telemetry = match &cli.command {
        Command::Serve { config, .. } => match start_telemetry(&runtime, config) {
            Ok(telemetry) => telemetry,
            Err(code) => return code,
        },
        _ => None,
    };
    if let Err(e) = init_logs(cli.log_format, &cli.audit_log, telemetry.as_ref()) {
        eprintln!("taskgate: {e}");
        return ExitCode::from(2);
    }
    let code = runtime.block_on(run(cli.command));
    // Outside the runtime's threads, on which the span processor runs.
    if let Some(telemetry) = &telemetry {
        telemetry.shutdown();
    }
    code
}

/// The trace exporter of `serve`, when `[telemetry]` names an endpoint: built
/// before the log layers are stacked (it is one of them), in the runtime it
/// exports from. A file that does not load, or whose `[telemetry]` is wrong,
/// gives `None` here: the full check that follows reports every problem.
fn start_telemetry(
    runtime: &tokio::runtime::Runtime,
    config: &std::path::Path,
) -> Result<Option<taskgate::telemetry::Telemetry>, ExitCode> {
    let Ok(cfg) = taskgate::core::config::load(config) else {
        return Ok(None);
    };
    let Ok(Some(settings)) = taskgate::telemetry::settings(&cfg.telemetry) else {
        return Ok(None);
    };
    let _in_runtime = runtime.enter();
    match taskgate::telemetry::Telemetry::start(settings) {
        Ok(telemetry) => Ok(Some(telemetry)),
        Err(e) => {
            let mut message = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(cause) = source {
                message.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            eprintln!("taskgate: {message}");
            Err(ExitCode::from(2))
        }
    }
}

/// File descriptors `serve` keeps for itself besides one per connection: the
/// listener, the metrics port, each lane's event loop, engine clients, the
/// exec engine's file-system watch, log and audit files.
const OWN_FILES: u64 = 256;

/// Raises the soft limit on open files (`RLIMIT_NOFILE`) to the hard limit
/// and logs what it got. Every HTTP connection holds a file descriptor for its
/// life, an open `subscriptions/listen` stream included, so a soft limit of
/// 1,024 (a common default) would refuse connections long before
/// `server.max_waits` streams are open. Warns when the limit it got leaves
/// fewer than `max_waits` connections. The hard limit is the operator's
/// (`ulimit -Hn`, systemd's `LimitNOFILE`, the container runtime's).
fn raise_open_files(max_waits: usize) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok(limits) => limits,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the limit on open files");
            return;
        }
    };
    let got = if soft < hard {
        match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => hard,
            Err(e) => {
                tracing::warn!(error = %e, soft, hard, "cannot raise the limit on open files");
                soft
            }
        }
    } else {
        soft
    };
    tracing::info!(
        open_files = got,
        was = soft,
        hard,
        "limit on open files (RLIMIT_NOFILE): {got}"
    );
    let wanted = (max_waits as u64).saturating_add(OWN_FILES);
    if got < wanted {
        tracing::warn!(
            open_files = got,
            max_waits,
            "the limit on open files ({got}) is below server.max_waits + {OWN_FILES}: connections past it are refused; raise the hard limit (ulimit -Hn, LimitNOFILE)"
        );
    }
}

/// Prints every problem of a configuration, one line each, and exits 2.
fn config_error(e: &taskgate::ConfigFileError) -> ExitCode {
    let lines = e.lines();
    if let [one] = lines.as_slice() {
        eprintln!("taskgate: config error: {one}");
    } else {
        eprintln!("taskgate: {} config errors:", lines.len());
        for line in lines {
            eprintln!("  - {line}");
        }
    }
    ExitCode::from(2)
}

async fn run(command: Command) -> ExitCode {
    match command {
        Command::Serve {
            config,
            stdio,
            listen,
        } => {
            let checked = if stdio { None } else { listen };
            let gw = match taskgate::load_listening(&config, checked).await {
                Ok(gw) => Arc::new(gw),
                Err(e) => return config_error(&e),
            };
            if !stdio {
                raise_open_files(gw.server.max_waits);
            }
            // A bounded sweep of what engines keep on this host (exec runs past
            // their retention); there is no background loop.
            for (name, engine) in &gw.engines {
                for finding in engine.tidy().await {
                    tracing::info!(engine = %name, "{finding}");
                }
            }
            let outcome = if stdio {
                taskgate::transport::stdio::serve(gw, tokio::io::stdin(), tokio::io::stdout()).await
            } else {
                let addr = gw.server.listen;
                taskgate::transport::http::serve(gw, addr).await
            };
            match outcome {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("taskgate: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::CheckConfig { config } => {
            let gw = match taskgate::load(&config).await {
                Ok(gw) => gw,
                Err(e) => return config_error(&e),
            };
            println!(
                "{}: configuration is valid ({} tools)",
                config.display(),
                gw.tools().len()
            );
            let mut ok = true;
            for (name, engine) in &gw.engines {
                match engine.probe().await {
                    Ok(findings) => {
                        println!("engine {name} ({}): ok", engine.kind());
                        for f in findings {
                            println!("  {f}");
                        }
                    }
                    Err(e) => {
                        ok = false;
                        println!("engine {name} ({}): FAILED: {e}", engine.kind());
                    }
                }
            }
            for tool in gw.tools() {
                match tool.pipeline.check().await {
                    Ok(findings) => {
                        println!("tool {}: ok", tool.name());
                        for f in findings {
                            println!("  {f}");
                        }
                    }
                    Err(e) => {
                        ok = false;
                        println!("tool {}: FAILED: {e}", tool.name());
                    }
                }
            }
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Command::Tools {
            config,
            as_caller,
            scopes,
            groups,
        } => match taskgate::load(&config).await {
            Ok(gw) => {
                let caller = as_caller.map(|name| {
                    let base = if name == "local" {
                        taskgate::server::local_caller(&gw)
                    } else {
                        gw.bearer
                            .iter()
                            .map(|(_, c)| c)
                            .find(|c| c.id() == name)
                            .cloned()
                            .unwrap_or_else(|| taskgate::core::Caller::plain(name))
                    };
                    taskgate::core::Caller::new(
                        base.id(),
                        base.scopes().iter().cloned().chain(scopes),
                        base.groups().iter().cloned().chain(groups),
                    )
                });
                let tools: Vec<serde_json::Value> = gw
                    .tools()
                    .iter()
                    .filter(|t| caller.as_ref().is_none_or(|c| gw.visible_to(c, t)))
                    .map(|t| {
                        taskgate::dialect::wire::tool_entry(
                            t,
                            taskgate::dialect::wire::Version::V2026_07_28,
                            None,
                        )
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&tools).expect("json"));
                ExitCode::SUCCESS
            }
            Err(e) => config_error(&e),
        },
        Command::Discover(args) => match taskgate::load(&args.config).await {
            Ok(gw) => cli::discover::run(&gw, &args).await,
            Err(e) => config_error(&e),
        },
        Command::Call(args) => cli::call(args).await,
        Command::Tasks { command } => cli::tasks(command).await,
        Command::HostConfig(args) => cli::host_config::run(&args),
        #[cfg(feature = "exec")]
        Command::Supervise { .. } => unreachable!("handled before the runtime starts"),
        Command::Keygen => unreachable!("handled before the runtime starts"),
    }
}
