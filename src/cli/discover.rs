//! `taskgate discover`: asks the configured engines which pipelines they
//! already run and prints them as `[[tools]]` entries, ready to append to the
//! configuration (`taskgate check-config` accepts them as they are).
//!
//! Unlike `call` and `tasks`, this command reads the configuration: it loads
//! it as `serve` does (every check, no engine called), then calls each chosen
//! engine's `discover` once, within `--timeout`. Engines only read upstream.
//!
//! What an engine reports is untrusted text: names become valid tool names
//! ([`valid_name`]: the rules of `tools[].name`), unique against each other and
//! the configuration's tools; everything is written through a TOML serializer;
//! comments ([`comment`]) and descriptions lose their control characters.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Map, Value};
use taskgate::Gateway;
use taskgate_engine::{DiscoverOptions, Discovered, Engine, EngineError};

/// The exit codes of `taskgate discover`.
pub const EXIT_CODES: &str = "Exit codes: 0 when a tool was found or no engine failed (an engine \
that fails or cannot discover is reported on stderr and in --json's \"errors\"); 1 when no tool \
was found and an engine failed, or when --write was refused; 2 for a configuration or usage error.";

/// The longest comment line written for a tool's origin or a note.
const MAX_COMMENT: usize = 300;

/// The longest tool name (`tools[].name`).
const MAX_NAME: usize = 64;

/// `taskgate discover`.
#[derive(Debug, Clone, clap::Args)]
pub struct DiscoverArgs {
    /// The config file: its engines are asked, and its tools' names stay taken.
    #[arg(long, short, env = "TASKGATE_CONFIG", default_value = "taskgate.toml")]
    pub config: PathBuf,
    /// Ask only this engine (a key of `[engines]`); repeatable. Default: every
    /// configured engine.
    #[arg(long = "engine", value_name = "NAME")]
    pub engines: Vec<String>,
    /// Keep only tools whose name (as suggested, or as made valid) matches this
    /// glob (`*` any text, `?` one character); repeatable: any one may match.
    #[arg(long = "match", value_name = "GLOB")]
    pub matches: Vec<String>,
    /// Leave out tools whose name matches this glob; repeatable.
    #[arg(long = "exclude", value_name = "GLOB")]
    pub excludes: Vec<String>,
    /// Include what engines have switched off: paused Airflow DAGs, disabled
    /// GitHub workflows, suspended CronJobs.
    #[arg(long)]
    pub all: bool,
    /// How many recent runs an engine may read to infer an input schema when
    /// the pipeline declares none (Step Functions); only their shape is used.
    /// 0 reads none; at most 100.
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u16).range(0..=100))]
    pub sample: u16,
    /// Kubernetes CronJobs: make the job template's container environment into
    /// declared arguments.
    #[arg(long)]
    pub args_from_env: bool,
    /// Append the entries to FILE (created when missing) instead of printing
    /// them. The file's existing text is kept byte for byte; nothing is written
    /// when FILE already has a tool of one of the new names, or would no longer
    /// be TOML.
    #[arg(long, value_name = "FILE")]
    pub write: Option<PathBuf>,
    /// Print one JSON object for scripts: {"tools": [...], "errors": [...]}.
    #[arg(long, conflicts_with = "write")]
    pub json: bool,
    /// How long each engine may take to answer, in all.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

/// A tool to print: its final name, its engine, what the engine said.
#[derive(Debug)]
struct Entry {
    name: String,
    engine: String,
    found: Discovered,
}

/// An engine that could not answer.
#[derive(Debug, Serialize)]
struct Failure {
    engine: String,
    message: String,
}

/// Runs `taskgate discover` on a loaded configuration.
pub async fn run(gw: &Gateway, args: &DiscoverArgs) -> ExitCode {
    let chosen: Vec<(&String, &Arc<dyn Engine>)> = if args.engines.is_empty() {
        gw.engines.iter().collect()
    } else {
        let mut chosen = Vec::new();
        for name in &args.engines {
            match gw.engines.get_key_value(name) {
                Some(pair) => chosen.push(pair),
                None => {
                    let known: Vec<&str> = gw.engines.keys().map(String::as_str).collect();
                    tell!(
                        "taskgate: no engine {:?} in {} (configured: {})",
                        comment(name),
                        args.config.display(),
                        known.join(", ")
                    );
                    return ExitCode::from(2);
                }
            }
        }
        chosen
    };
    let options = DiscoverOptions {
        all: args.all,
        sample: usize::from(args.sample),
        args_from_env: args.args_from_env,
    };
    let answers = futures::future::join_all(chosen.iter().map(|(name, engine)| {
        let options = &options;
        async move {
            let answer = tokio::time::timeout(args.timeout, engine.discover(options)).await;
            ((*name).clone(), engine.kind(), answer)
        }
    }))
    .await;
    let mut errors = Vec::new();
    let mut found = Vec::new();
    for (engine, kind, answer) in answers {
        let message = match answer {
            Ok(Ok(tools)) => {
                found.extend(tools.into_iter().map(|t| (engine.clone(), t)));
                continue;
            }
            Ok(Err(EngineError::Unsupported { .. })) => {
                format!("the {kind} engine cannot discover pipelines (yet)")
            }
            Ok(Err(e)) => comment(&e.to_string()),
            Err(_) => format!(
                "no answer within {} (--timeout)",
                humantime::format_duration(args.timeout)
            ),
        };
        tell!("taskgate: engine {engine}: {message}");
        errors.push(Failure { engine, message });
    }
    let any_found = !found.is_empty();
    let entries = name_entries(gw, args, found);
    let outcome = if args.json {
        print_json(&entries, &errors);
        Ok(())
    } else {
        let mut text = String::new();
        let mut written = Vec::new();
        for e in &entries {
            match toml_entry(e) {
                Ok(t) => {
                    text.push_str(&t);
                    written.push(e.name.clone());
                }
                Err(message) => {
                    let message = format!("tool {}: {message}; left out", e.name);
                    tell!("taskgate: engine {}: {message}", e.engine);
                    errors.push(Failure {
                        engine: e.engine.clone(),
                        message,
                    });
                }
            }
        }
        let engines: Vec<&str> = chosen.iter().map(|(n, _)| n.as_str()).collect();
        let header = format!(
            "# {} tool(s) found by `taskgate discover` (engines: {}). Review each entry:\n\
             # `taskgate check-config` accepts them appended to the configuration as they are.\n",
            written.len(),
            engines.join(", ")
        );
        match &args.write {
            None => {
                say!("{header}{text}");
                Ok(())
            }
            Some(file) if written.is_empty() => {
                tell!("taskgate: no new tool; {} left as it is", file.display());
                Ok(())
            }
            Some(file) => append(file, &format!("{header}{text}"), &written).map(|()| {
                tell!(
                    "taskgate: appended {} tool(s) to {}",
                    written.len(),
                    file.display()
                );
            }),
        }
    };
    if let Err(message) = outcome {
        tell!("taskgate: {message}");
        return ExitCode::FAILURE;
    }
    if any_found || errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Valid, unique names for what the engines found, after the filters; a
/// pipeline the configuration already has as a tool (same engine, same
/// target) is left out.
fn name_entries(gw: &Gateway, args: &DiscoverArgs, found: Vec<(String, Discovered)>) -> Vec<Entry> {
    let mut taken: BTreeSet<String> = gw.tools().iter().map(|t| t.name().to_owned()).collect();
    let mut entries = Vec::new();
    for (engine, d) in found {
        if let Some(tool) = gw
            .tools()
            .iter()
            .find(|t| t.config.engine == engine && t.config.target == d.target)
        {
            tell!(
                "taskgate: engine {engine}: {} is configured already (tool {}); left out",
                comment(&d.origin),
                tool.name()
            );
            continue;
        }
        let base = valid_name(&d.name);
        let matches = |glob: &String| glob_match(glob, &d.name) || glob_match(glob, &base);
        if !args.matches.is_empty() && !args.matches.iter().any(matches) {
            continue;
        }
        if args.excludes.iter().any(matches) {
            continue;
        }
        let name = unique(&base, &mut taken);
        entries.push(Entry {
            name,
            engine,
            found: d,
        });
    }
    entries
}

/// A valid tool name from a suggestion: lower case, `[a-z0-9_.-]`, every
/// other run of characters one `_`, 1 to 64 characters, not `taskgate_…`
/// (taskgate's own).
#[must_use]
pub fn valid_name(suggested: &str) -> String {
    let mut out = String::new();
    for c in suggested.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_alphanumeric() || matches!(c, '-' | '.') {
            out.push(c);
        } else if !out.ends_with('_') {
            out.push('_');
        }
    }
    let trimmed = out.trim_matches(|c| matches!(c, '_' | '-' | '.'));
    let mut name: String = trimmed.chars().take(MAX_NAME).collect();
    if name.is_empty() {
        name = "tool".to_owned();
    }
    if name.starts_with("taskgate_") {
        name = format!("run_{name}").chars().take(MAX_NAME).collect();
    }
    name
}

/// `base`, or `base_2`, `base_3`, … (cut to fit 64 characters): the first not
/// in `taken`, which it joins.
fn unique(base: &str, taken: &mut BTreeSet<String>) -> String {
    let mut name = base.to_owned();
    let mut n = 1;
    while taken.contains(&name) {
        n += 1;
        let suffix = format!("_{n}");
        let keep: String = base.chars().take(MAX_NAME - suffix.len()).collect();
        name = format!("{keep}{suffix}");
    }
    taken.insert(name.clone());
    name
}

/// True when `text` matches `glob` whole: `*` any run of characters, `?` one.
#[must_use]
pub fn glob_match(glob: &str, text: &str) -> bool {
    let (g, t): (Vec<char>, Vec<char>) = (glob.chars().collect(), text.chars().collect());
    let (mut gi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if gi < g.len() && (g[gi] == '?' || g[gi] == t[ti]) {
            gi += 1;
            ti += 1;
        } else if gi < g.len() && g[gi] == '*' {
            star = Some((gi, ti));
            gi += 1;
        } else if let Some((sg, st)) = star {
            gi = sg + 1;
            ti = st + 1;
            star = Some((sg, st + 1));
        } else {
            return false;
        }
    }
    g[gi..].iter().all(|c| *c == '*')
}

/// One line of comment text: control characters (line breaks included, and
/// Unicode's line and paragraph separators) become spaces, runs of spaces one,
/// at most [`MAX_COMMENT`] characters.
#[must_use]
pub fn comment(text: &str) -> String {
    let spaced: String = text
        .chars()
        .map(|c| {
            if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') {
                ' '
            } else {
                c
            }
        })
        .collect();
    let mut line = spaced.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() > MAX_COMMENT {
        line = line.chars().take(MAX_COMMENT - 1).collect::<String>() + "…";
    }
    line
}

/// A description as clients will see it: control characters other than line
/// breaks and tabs removed, surrounding space trimmed.
fn clean_description(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_control() || matches!(c, '\n' | '\t'))
        .collect::<String>()
        .trim()
        .to_owned()
}

/// `value` without null members (TOML has no null; a JSON Schema member that
/// is null, such as a `default`, says nothing).
///
/// # Errors
///
/// A null inside an array, which TOML cannot hold.
fn without_nulls(value: &Value, at: &str) -> Result<Value, String> {
    Ok(match value {
        Value::Object(map) => {
            let mut out = Map::new();
            for (k, v) in map {
                if !v.is_null() {
                    out.insert(k.clone(), without_nulls(v, &format!("{at}.{k}"))?);
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    if v.is_null() {
                        Err(format!("{at}[{i}] is null, which TOML cannot hold"))
                    } else {
                        without_nulls(v, &format!("{at}[{i}]"))
                    }
                })
                .collect::<Result<_, _>>()?,
        ),
        other => other.clone(),
    })
}

/// `value` as one inline TOML value, written by the TOML serializer.
fn inline(value: &Value) -> Result<String, String> {
    let mut out = String::new();
    value
        .serialize(toml::ser::ValueSerializer::new(&mut out))
        .map_err(|err| format!("cannot be written as TOML: {err}"))?;
    Ok(out)
}

/// A TOML key: bare when it can be, else a quoted key with every `"`, `\`
/// and control character escaped.
fn key(k: &str) -> String {
    if !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
    {
        return k.to_owned();
    }
    let mut out = String::from('"');
    for c in k.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// One tool's TOML text: `# from:` and `# note:` comment lines, then the
/// `[[tools]]` table (its `target` inline), its `input_schema` as a table and
/// each argument's schema on one line. Every value and key goes through
/// [`inline`] or [`key`].
fn toml_entry(e: &Entry) -> Result<String, String> {
    let Value::Object(schema) = without_nulls(&e.found.input_schema, "input_schema")? else {
        return Err("its input schema is not an object".to_owned());
    };
    let target = without_nulls(&e.found.target, "target")?;
    let mut text = format!("\n# from: {}\n", comment(&e.found.origin));
    for note in &e.found.notes {
        text.push_str(&format!("# note: {}\n", comment(note)));
    }
    text.push_str("[[tools]]\n");
    for (k, v) in [
        ("name", json!(e.name)),
        ("engine", json!(e.engine)),
        (
            "description",
            json!(clean_description(&e.found.description)),
        ),
        ("mode", json!("hybrid")),
        ("target", target),
    ] {
        text.push_str(&format!("{k} = {}\n", inline(&v)?));
    }
    text.push_str("\n[tools.input_schema]\n");
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .filter(|p| !p.is_empty());
    for (k, v) in &schema {
        if !(k == "properties" && properties.is_some()) {
            text.push_str(&format!("{} = {}\n", key(k), inline(v)?));
        }
    }
    if let Some(properties) = properties {
        text.push_str("\n[tools.input_schema.properties]\n");
        for (k, v) in properties {
            text.push_str(&format!("{} = {}\n", key(k), inline(v)?));
        }
    }
    Ok(text)
}

/// `--json`: every tool with its origin and notes, and the engines that failed.
fn print_json(entries: &[Entry], errors: &[Failure]) {
    let tools: Vec<Value> = entries
        .iter()
        .map(|e| {
            json!({
                "name": e.name,
                "engine": e.engine,
                "description": clean_description(&e.found.description),
                "origin": e.found.origin,
                "notes": e.found.notes,
                "target": e.found.target,
                "input_schema": e.found.input_schema,
            })
        })
        .collect();
    say!(
        "{}",
        serde_json::to_string_pretty(&json!({ "tools": tools, "errors": errors }))
            .expect("JSON values serialize")
    );
}

/// The tool names a TOML text declares (`[[tools]]` `name`s).
fn tool_names(text: &str) -> Result<BTreeSet<String>, String> {
    let doc: toml::Table = text.parse().map_err(|e| format!("not TOML: {e}"))?;
    Ok(doc
        .get("tools")
        .and_then(toml::Value::as_array)
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t.get("name").and_then(toml::Value::as_str))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default())
}

/// Appends `text` (holding the tools `names`) to `file`, leaving what it
/// holds as it is.
///
/// # Errors
///
/// Why nothing was written: the file cannot be read or is not TOML, it has a
/// tool of one of `names`, the result would not be TOML, or the write failed.
fn append(file: &Path, text: &str, names: &[String]) -> Result<(), String> {
    let shown = file.display();
    let existing = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(format!("cannot read {shown}: {e}; nothing written")),
    };
    let there = tool_names(&existing).map_err(|e| format!("{shown} is {e}; nothing written"))?;
    let clashes: Vec<&str> = names
        .iter()
        .filter(|n| there.contains(*n))
        .map(String::as_str)
        .collect();
    if !clashes.is_empty() {
        return Err(format!(
            "{shown} already has tools named {}; nothing written (rename them there, or leave them out with --exclude)",
            clashes.join(", ")
        ));
    }
    let mut addition = String::new();
    if !existing.is_empty() {
        if !existing.ends_with('\n') {
            addition.push('\n');
        }
        addition.push('\n');
    }
    addition.push_str(text);
    tool_names(&format!("{existing}{addition}")).map_err(|e| {
        format!("{shown} with the new entries would not be TOML ({e}); nothing written")
    })?;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .and_then(|mut f| f.write_all(addition.as_bytes()))
        .map_err(|e| format!("cannot write {shown}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_made_valid() {
        for (raw, want) in [
            ("Deploy", "deploy"),
            ("Deploy to production!", "deploy_to_production"),
            ("tg_discover.params-1", "tg_discover.params-1"),
            (
                "\"]\n[server]\nlisten=\"0.0.0.0:1\"",
                "server_listen_0.0.0.0_1",
            ),
            ("", "tool"),
            ("***", "tool"),
            ("taskgate_logs", "run_taskgate_logs"),
            ("Ünïcode ✓ name", "n_code_name"),
        ] {
            assert_eq!(valid_name(raw), want, "{raw:?}");
        }
        let long = valid_name(&"a".repeat(200));
        assert_eq!(long.len(), 64);
    }

    #[test]
    fn names_are_made_unique() {
        let mut taken: BTreeSet<String> = ["deploy".to_owned()].into();
        assert_eq!(unique("deploy", &mut taken), "deploy_2");
        assert_eq!(unique("deploy", &mut taken), "deploy_3");
        assert_eq!(unique("ci", &mut taken), "ci");
        let long = "x".repeat(64);
        taken.insert(long.clone());
        let second = unique(&long, &mut taken);
        assert_eq!(second.len(), 64);
        assert!(second.ends_with("_2"));
    }

    #[test]
    fn globs_match_whole_names() {
        assert!(glob_match("deploy*", "deploy_prod"));
        assert!(glob_match("*prod", "deploy_prod"));
        assert!(glob_match("d?ploy", "deploy"));
        assert!(glob_match("*", ""));
        assert!(glob_match("a*b*c", "axxbyyc"));
        assert!(!glob_match("deploy", "deploy_prod"));
        assert!(!glob_match("a*b*c", "axxbyy"));
        assert!(!glob_match("?", ""));
    }

    #[test]
    fn comments_stay_on_one_line() {
        assert_eq!(
            comment("a\nb\r\n[server]\u{2028}c\u{1b}[31m  d"),
            "a b [server] c [31m d"
        );
        assert_eq!(comment(&"x".repeat(400)).chars().count(), MAX_COMMENT);
    }

    fn entry(name: &str, description: &str, origin: &str) -> Entry {
        Entry {
            name: name.to_owned(),
            engine: "gh".to_owned(),
            found: Discovered {
                name: name.to_owned(),
                description: description.to_owned(),
                origin: origin.to_owned(),
                target: json!({"owner": "o", "repo": "r", "workflow": "a.yml", "ref": "main"}),
                input_schema: json!({"type": "object", "properties": {"who": {"type": ["null", "string"], "default": null}}}),
                notes: vec!["one\nnote".to_owned()],
            },
        }
    }

    /// Text from an engine cannot add tables, keys or lines of its own to the
    /// TOML: it reads back as the same data, one entry.
    #[test]
    fn hostile_text_stays_data() {
        let description = "x\"\"\"\n[[tools]]\nname = \"pwned\"\nengine = \"x\"\n\u{7}";
        let origin = "\"]\n[server]\nlisten = \"0.0.0.0:1\"\n# \u{1b}[31mred";
        let text = toml_entry(&entry("deploy", description, origin)).unwrap();
        let doc: toml::Table = text.parse().unwrap();
        assert_eq!(doc.keys().collect::<Vec<_>>(), ["tools"], "{text}");
        let tools = doc["tools"].as_array().unwrap();
        assert_eq!(tools.len(), 1, "{text}");
        assert_eq!(tools[0]["name"].as_str(), Some("deploy"));
        assert_eq!(
            tools[0]["description"].as_str(),
            Some("x\"\"\"\n[[tools]]\nname = \"pwned\"\nengine = \"x\"")
        );
        assert_eq!(tools[0]["mode"].as_str(), Some("hybrid"));
        // The null default is gone; the rest of the schema is intact.
        assert_eq!(
            tools[0]["input_schema"]["properties"]["who"]["type"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
        for line in text.lines().filter(|l| l.starts_with('#')) {
            assert!(!line.contains('\u{1b}'), "{line:?}");
        }
        assert!(
            text.contains("# from: \"] [server] listen = \"0.0.0.0:1\" # [31mred\n"),
            "{text}"
        );
        assert!(text.contains("# note: one note\n"), "{text}");
        // A hostile argument name is a quoted key, read back as it was.
        let mut e = entry("t", "d", "o");
        let name = "a\"]\n[server]\n\\x\u{1b}";
        e.found.input_schema["properties"][name] = json!({"type": "string"});
        let text = toml_entry(&e).unwrap();
        let doc: toml::Table = text.parse().unwrap_or_else(|err| panic!("{err}: {text}"));
        let props = doc["tools"][0]["input_schema"]["properties"]
            .as_table()
            .unwrap();
        assert_eq!(props.len(), 2, "{text}");
        assert_eq!(props[name]["type"].as_str(), Some("string"), "{text}");
        assert!(!text.lines().any(|l| l.starts_with("[server]")), "{text}");
    }

    #[test]
    fn a_null_in_an_array_is_refused() {
        let mut e = entry("t", "d", "o");
        e.found.input_schema =
            json!({"type": "object", "properties": {"x": {"enum": [null, "a"]}}});
        let err = toml_entry(&e).unwrap_err();
        assert!(
            err.contains("input_schema.properties.x.enum[0] is null"),
            "{err}"
        );
    }

    #[test]
    fn append_keeps_the_file_and_refuses_duplicates() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tools.toml");
        let before = "# mine\n[[tools]]\nname = \"deploy\"\nengine = \"gh\"";
        std::fs::write(&file, before).unwrap();
        let text = toml_entry(&entry("ci", "d", "o")).unwrap();
        append(&file, &text, &["ci".to_owned()]).unwrap();
        let after = std::fs::read_to_string(&file).unwrap();
        assert!(after.starts_with(before), "{after}");
        assert_eq!(
            tool_names(&after).unwrap(),
            ["ci".to_owned(), "deploy".to_owned()].into()
        );
        let err = append(&file, &text, &["ci".to_owned()]).unwrap_err();
        assert!(err.contains("already has tools named ci"), "{err}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), after);
        // A file that is not TOML is left alone.
        std::fs::write(&file, "tools = [").unwrap();
        assert!(append(&file, &text, &["x".to_owned()]).is_err());
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "tools = [");
    }
}
