//! `taskgate discover` through the built binary: against the GitHub double
//! (payloads from GitHub's published examples) and the real Airflow of
//! `scripts/airflow/up.sh` (the DAGs of `tests/airflow/dags`). Each test
//! discovers, appends the output to the config, runs `check-config` on it, and
//! calls a discovered tool end to end through `taskgate serve`; and checks that
//! hostile names and descriptions stay data, and what `--write` keeps and
//! refuses.

use crate::common;

use std::process::Output;

use common::Setup;
use serde_json::{json, Value};

/// Runs `taskgate ARGS` on `setup`'s environment.
fn taskgate(setup: &Setup, args: &[&str]) -> Output {
    setup.command(args).output().expect("run taskgate")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The tables of a TOML text, by tool name.
fn toml_tools(text: &str) -> Vec<toml::Table> {
    let doc: toml::Table = text.parse().unwrap_or_else(|e| panic!("{e}: {text}"));
    let keys: Vec<&String> = doc.keys().collect();
    assert!(keys.is_empty() || keys == ["tools"], "{keys:?}: {text}");
    doc.get("tools")
        .and_then(toml::Value::as_array)
        .map(|a| {
            a.iter()
                .map(|t| t.as_table().expect("a table").clone())
                .collect()
        })
        .unwrap_or_default()
}

fn names(tools: &[toml::Table]) -> Vec<String> {
    tools
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// Appends `text` to the setup's config file.
fn append_to_config(setup: &Setup, text: &str) {
    let mut config = std::fs::read_to_string(&setup.config).unwrap();
    config.push('\n');
    config.push_str(text);
    std::fs::write(&setup.config, config).unwrap();
}

#[cfg(feature = "github")]
mod github {
    use super::*;

    use std::time::Duration;
    use taskgate_github_double::{Double, TOKEN};

    const TOKEN_VAR: &str = "TASKGATE_E2E_GITHUB_TOKEN";

    /// A workflow name and an input description written to break out of a
    /// TOML file.
    const HOSTILE_NAME: &str = "\"]\n[server]\nlisten = \"0.0.0.0:1\"\n# \u{1b}[31mred";
    const HOSTILE_YAML: &str = "name: x\non:\n  workflow_dispatch:\n    inputs:\n      note:\n        description: \"x\\\"\\\"\\\"\\n[[tools]]\\nname = \\\"pwned\\\"\\n\"\n        type: string\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo\n";

    /// The double with, besides its deploy workflow, a hostile one, a
    /// disabled one and one that cannot be dispatched; a config with its
    /// engine (and an exec engine, which cannot discover) and no tool.
    async fn double_and_config() -> (Double, Setup) {
        let d = Double::start().await;
        d.add_workflow("hostile.yml", HOSTILE_NAME, "active", HOSTILE_YAML);
        d.add_workflow(
            "nightly.yml",
            "Nightly",
            "disabled_manually",
            "on:\n  workflow_dispatch:\njobs:\n  a:\n    runs-on: x\n",
        );
        d.add_workflow(
            "ci.yml",
            "CI",
            "active",
            "on:\n  push:\njobs:\n  a:\n    runs-on: x\n",
        );
        let body = format!(
            "[engines.gh]\nkind = \"github\"\ntoken_env = \"{TOKEN_VAR}\"\nbase_url = \"{}\"\n\n\
             [engines.local]\nkind = \"exec\"\n",
            d.url
        );
        let setup = Setup::config(&body, &[(TOKEN_VAR, TOKEN)]);
        (d, setup)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn discovered_workflows_pass_check_config_and_run() {
        let (d, s) = double_and_config().await;
        let config = s.config.display().to_string();
        let out = taskgate(&s, &["discover", "--config", &config]);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        // An engine that cannot discover is reported, and tools were found: 0.
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert!(
            stderr.contains("engine local: the exec engine cannot discover pipelines"),
            "{stderr}"
        );
        let tools = toml_tools(&stdout);
        assert_eq!(
            names(&tools),
            ["deploy", "server_listen_0.0.0.0_1_31mred"],
            "{stdout}"
        );
        let deploy = &tools[0];
        assert_eq!(deploy["engine"].as_str(), Some("gh"));
        assert_eq!(deploy["mode"].as_str(), Some("hybrid"));
        let schema: Value = serde_json::to_value(&deploy["input_schema"]).unwrap();
        // The workflow's `traceparent` input carries the trace context
        // (`trace_input`): no argument of the tool.
        let mut want = taskgate_github_double::suggested_input_schema();
        want["properties"]
            .as_object_mut()
            .unwrap()
            .remove("traceparent");
        assert_eq!(schema, want);
        let target: Value = serde_json::to_value(&deploy["target"]).unwrap();
        assert_eq!(
            target,
            json!({"owner": "octo-org", "repo": "octo-repo", "workflow": "deploy.yml", "ref": "main", "correlate": "always", "trace_input": "traceparent"})
        );
        assert!(
            stdout.contains("# from: GitHub workflow \"Deploy\" (.github/workflows/deploy.yml) in octo-org/octo-repo\n"),
            "{stdout}"
        );
        assert!(
            stdout.contains("# note: environment \"staging\" requires a reviewer's approval"),
            "{stdout}"
        );
        // The hostile workflow's name and its input's description are data.
        let hostile = &tools[1];
        let description = hostile["input_schema"]["properties"]["note"]["description"]
            .as_str()
            .unwrap();
        assert_eq!(description, "x\"\"\"\n[[tools]]\nname = \"pwned\"\n");
        assert!(!stdout.contains('\u{1b}'), "{stdout}");
        assert!(
            !stdout
                .lines()
                .any(|l| l.trim_start().starts_with("[server]")),
            "{stdout}"
        );

        // Appended to the config, check-config accepts every entry.
        append_to_config(&s, &stdout);
        let check = taskgate(&s, &["check-config", "--config", &config]);
        let report = text(&check.stdout);
        assert_eq!(
            check.status.code(),
            Some(0),
            "{report}{}",
            text(&check.stderr)
        );
        assert!(report.contains("(2 tools)"), "{report}");
        assert!(report.contains("tool deploy: ok"), "{report}");
        assert!(
            report.contains("the tool's input_schema matches the workflow's inputs"),
            "{report}"
        );
        let whole: toml::Table = std::fs::read_to_string(&s.config).unwrap().parse().unwrap();
        assert_eq!(whole["server"]["listen"].as_str(), Some("127.0.0.1:0"));

        // The discovered tool runs end to end.
        let server = s.server().await;
        let c = server.client();
        let task = c.start_task("deploy", json!({"version": "1.2.3"})).await;
        let ids = d.run_ids();
        assert_eq!(ids.len(), 1, "{ids:?}");
        d.set_run(ids[0], "completed", Some("success"));
        let done = c
            .until_status(&task, "completed", Duration::from_secs(30))
            .await;
        assert_eq!(done["result"]["isError"], false, "{done}");
        d.assert_clean();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn filters_all_and_json() {
        let (d, s) = double_and_config().await;
        let config = s.config.display().to_string();
        // --all includes the disabled workflow, with a note.
        let out = taskgate(
            &s,
            &[
                "discover", "--config", &config, "--engine", "gh", "--all", "--json",
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let found: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(found["errors"], json!([]), "{found}");
        let tools = found["tools"].as_array().unwrap();
        let listed: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(
            listed,
            ["deploy", "server_listen_0.0.0.0_1_31mred", "nightly"]
        );
        let nightly = &tools[2];
        assert_eq!(nightly["engine"], "gh");
        assert_eq!(
            nightly["origin"],
            "GitHub workflow \"Nightly\" (.github/workflows/nightly.yml) in octo-org/octo-repo"
        );
        assert!(
            nightly["notes"][0]
                .as_str()
                .unwrap()
                .contains("disabled_manually"),
            "{nightly}"
        );
        for key in ["description", "target", "input_schema"] {
            assert!(nightly.get(key).is_some(), "{key}: {nightly}");
        }
        // --match and --exclude on the names.
        let out = taskgate(
            &s,
            &[
                "discover",
                "--config",
                &config,
                "--engine",
                "gh",
                "--all",
                "--match",
                "*e*",
                "--exclude",
                "server*",
            ],
        );
        assert_eq!(names(&toml_tools(&text(&out.stdout))), ["deploy"]);
        // Only an engine that cannot discover: nothing found, an error: 1.
        let out = taskgate(&s, &["discover", "--config", &config, "--engine", "local"]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        // An engine the config does not have: a usage error.
        let out = taskgate(&s, &["discover", "--config", &config, "--engine", "nope"]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        d.assert_clean();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn write_appends_keeps_the_file_and_refuses_duplicates() {
        let (d, s) = double_and_config().await;
        let config = s.config.display().to_string();
        let before = std::fs::read(&s.config).unwrap();
        let out = taskgate(
            &s,
            &[
                "discover", "--config", &config, "--engine", "gh", "--write", &config,
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert!(out.stdout.is_empty());
        assert!(
            text(&out.stderr).contains("appended 2 tool(s)"),
            "{}",
            text(&out.stderr)
        );
        let after = std::fs::read(&s.config).unwrap();
        assert_eq!(
            &after[..before.len()],
            &before[..],
            "the file's text is kept"
        );
        let check = taskgate(&s, &["check-config", "--config", &config]);
        assert_eq!(
            check.status.code(),
            Some(0),
            "{}{}",
            text(&check.stdout),
            text(&check.stderr)
        );

        // Again: what the config has already is left out, and the file alone.
        let out = taskgate(
            &s,
            &[
                "discover", "--config", &config, "--engine", "gh", "--write", &config,
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("is configured already (tool deploy)"),
            "{}",
            text(&out.stderr)
        );
        assert_eq!(std::fs::read(&s.config).unwrap(), after);

        // Another file that has a tool of a discovered name: refused, untouched.
        let (_d2, fresh) = double_and_config().await;
        let other = fresh.dir.path().join("more-tools.toml");
        let mine = "# hand-written\n[[tools]]\nname = \"deploy\"\nengine = \"gh\"\n";
        std::fs::write(&other, mine).unwrap();
        let fresh_config = fresh.config.display().to_string();
        let other_path = other.display().to_string();
        let out = taskgate(
            &fresh,
            &[
                "discover",
                "--config",
                &fresh_config,
                "--engine",
                "gh",
                "--write",
                &other_path,
            ],
        );
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("already has tools named deploy; nothing written"),
            "{}",
            text(&out.stderr)
        );
        assert_eq!(std::fs::read_to_string(&other).unwrap(), mine);
        d.assert_clean();
    }
}

#[cfg(feature = "airflow")]
mod airflow {
    use super::*;

    use std::time::Duration;
    use taskgate_engine::testing::e2e_endpoint;

    fn setup(url: &str) -> Setup {
        let password = std::env::var("TASKGATE_AIRFLOW_PASSWORD")
            .unwrap_or_else(|_| "taskgate-test-password".into());
        let body = format!(
            "[engines.af]\nkind = \"airflow\"\nbase_url = \"{url}\"\nusername = \"taskgate\"\n\
             password_env = \"TG_TEST_AIRFLOW_PASSWORD\"\nconnect_timeout = \"20s\"\nread_timeout = \"40s\"\n"
        );
        Setup::config(
            &body,
            &[
                ("TG_TEST_AIRFLOW_PASSWORD", password.as_str()),
                ("TASKGATE__SERVER__CALL_TIMEOUT", "45s"),
            ],
        )
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn discovered_dags_pass_check_config_and_run() {
        let Some(url) = e2e_endpoint("TASKGATE_AIRFLOW_URL") else {
            return;
        };
        let s = setup(&url);
        let config = s.config.display().to_string();
        let out = taskgate(&s, &["discover", "--config", &config, "--match", "tg_*"]);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let tools = toml_tools(&stdout);
        let listed = names(&tools);
        for dag in [
            "tg_discover_params",
            "tg_discover_hostile",
            "tg_approval",
            "tg_success",
        ] {
            assert!(listed.iter().any(|n| n == dag), "{dag}: {listed:?}");
        }
        assert!(!listed.iter().any(|n| n == "tg_paused"), "{listed:?}");

        // Every kind of param, as JSON Schema.
        let params = tools
            .iter()
            .find(|t| t["name"].as_str() == Some("tg_discover_params"))
            .unwrap();
        assert_eq!(
            params["description"].as_str(),
            Some("Rebuild the reporting tables for one dataset")
        );
        let schema: Value = serde_json::to_value(&params["input_schema"]).unwrap();
        assert_eq!(
            schema,
            json!({"type": "object", "properties": {
                "dataset": {"type": "string", "description": "The dataset to rebuild", "default": "sales", "minLength": 1, "maxLength": 40, "pattern": "^[a-z][a-z0-9_]*$"},
                "region": {"type": "string", "enum": ["eu", "us", "apac"], "description": "Where", "default": "eu"},
                "rows": {"type": "integer", "minimum": 1, "maximum": 10000, "description": "Rows to sample", "default": 100},
                "ratio": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.5},
                "full_refresh": {"type": "boolean", "description": "Drop the tables first", "default": false},
                "tags": {"type": "array", "items": {"type": "string"}, "default": ["daily"]},
                "options": {"type": "object", "default": {"vacuum": true}},
                "owner": {"type": ["null", "string"], "description": "Who asked (optional)"},
                "run_date": {"type": "string", "format": "date", "default": "2026-01-01"},
                "limit": {"type": "integer", "default": 10},
            }}),
            "{stdout}"
        );
        assert!(
            stdout
                .contains("# note: params without a schema type, typed from their value: limit\n"),
            "{stdout}"
        );
        // A human step is marked.
        assert!(
            stdout.contains("# note: human-in-the-loop: approve_release (ApprovalOperator)"),
            "{stdout}"
        );
        // The hostile DAG's display name and description are data.
        let hostile = tools
            .iter()
            .find(|t| t["name"].as_str() == Some("tg_discover_hostile"))
            .unwrap();
        assert_eq!(
            hostile["description"].as_str(),
            Some("x\"\"\"\n[[tools]]\nname = \"pwned\"\nengine = \"x\"")
        );
        assert!(
            !stdout.contains('\u{1b}') && !stdout.contains('\u{7}'),
            "{stdout}"
        );

        // --all adds the paused DAG, noted.
        let all = taskgate(
            &s,
            &[
                "discover",
                "--config",
                &config,
                "--all",
                "--match",
                "tg_paused",
                "--json",
            ],
        );
        let all: Value = serde_json::from_slice(&all.stdout).unwrap();
        assert_eq!(all["tools"][0]["name"], "tg_paused", "{all}");
        assert!(
            all["tools"][0]["notes"][0]
                .as_str()
                .unwrap()
                .contains("paused"),
            "{all}"
        );

        // Appended to the config, check-config accepts every entry.
        append_to_config(&s, &stdout);
        let check = taskgate(&s, &["check-config", "--config", &config]);
        let report = text(&check.stdout);
        assert_eq!(
            check.status.code(),
            Some(0),
            "{report}{}",
            text(&check.stderr)
        );
        assert!(report.contains("tool tg_discover_params: ok"), "{report}");

        // The discovered tool runs end to end.
        let server = s.server().await;
        let c = server.client();
        let task = c
            .start_task("tg_discover_params", json!({"dataset": "books", "rows": 5}))
            .await;
        let done = c
            .until_status(&task, "completed", Duration::from_secs(180))
            .await;
        assert_eq!(done["result"]["isError"], false, "{done}");
    }
}
