//! `taskgate discover` on GitHub: the dispatchable workflows of the
//! repositories the engine looks in, each as a tool entry.
//!
//! Only reads, each call through [`Client`] (its connect and read timeouts),
//! and bounded: at most [`MAX_REPOS`] repositories (one listing page), one page
//! of [`MAX_WORKFLOWS`] workflows and one of environments per repository, and at
//! most [`MAX_FILES`] workflow files read in all. Per repository: the workflow
//! listing, the environments (only when a workflow is a candidate) and one
//! contents read per candidate workflow.

use base64::Engine as _;
use http::Method;
use serde::Deserialize;
use serde_json::{json, Value};
use taskgate_engine::http::{percent_encode, percent_encode_path};
use taskgate_engine::{DiscoverOptions, Discovered, EngineError};

use crate::api::Client;
use crate::config::{Auth, Validated, DEFAULT_CORRELATION_INPUT, MAX_REPOS};
use crate::rate_budget::RateBudget;
use crate::workflow::{self, WorkflowError};

/// The most workflows read per repository (one listing page).
const MAX_WORKFLOWS: usize = 100;

/// The most workflow files one discover reads.
const MAX_FILES: usize = 200;

#[derive(Debug, Deserialize)]
struct Repo {
    name: String,
    owner: Owner,
    #[serde(default)]
    default_branch: Option<String>,
    #[serde(default)]
    archived: bool,
}

#[derive(Debug, Deserialize)]
struct Owner {
    login: String,
}

#[derive(Debug, Deserialize)]
struct InstallationRepos {
    repositories: Vec<Repo>,
}

#[derive(Debug, Deserialize)]
struct Workflows {
    total_count: u64,
    workflows: Vec<Workflow>,
}

#[derive(Debug, Deserialize)]
struct Workflow {
    id: u64,
    name: String,
    path: String,
    state: String,
}

#[derive(Debug, Deserialize)]
struct Environments {
    #[serde(default)]
    environments: Vec<Environment>,
}

/// A deployment environment and what its protection rules ask.
#[derive(Debug, Deserialize)]
struct Environment {
    name: String,
    #[serde(default)]
    protection_rules: Vec<Value>,
}

impl Environment {
    /// `Some(prevent_self_review)` when a reviewer must approve a deployment.
    fn reviewers(&self) -> Option<bool> {
        self.protection_rules
            .iter()
            .find(|r| {
                r.get("type").and_then(Value::as_str) == Some("required_reviewers")
                    && r.get("reviewers")
                        .and_then(Value::as_array)
                        .is_some_and(|a| !a.is_empty())
            })
            .map(|r| {
                r.get("prevent_self_review")
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
            })
    }
}

/// The repositories to look in: the configured ones, or those the
/// credentials see.
async fn repositories(
    client: &Client,
    settings: &Validated,
    budget: &mut RateBudget,
) -> Result<Vec<Repo>, EngineError> {
    if !settings.discover_repos.is_empty() {
        let mut repos = Vec::new();
        for (owner, repo) in &settings.discover_repos {
            let path = format!("/repos/{}/{}", percent_encode(owner), percent_encode(repo));
            repos.push(
                client
                    .call(Method::GET, &path, None, "metadata: read", budget)
                    .await?
                    .json()?,
            );
        }
        return Ok(repos);
    }
    let mut repos = match settings.auth {
        Auth::Token(_) => client
            .call(
                Method::GET,
                &format!("/user/repos?per_page={MAX_REPOS}&sort=pushed"),
                None,
                "metadata: read",
                budget,
            )
            .await?
            .json::<Vec<Repo>>()?,
        Auth::App { .. } => {
            client
                .call(
                    Method::GET,
                    &format!("/installation/repositories?per_page={MAX_REPOS}"),
                    None,
                    "metadata: read",
                    budget,
                )
                .await?
                .json::<InstallationRepos>()?
                .repositories
        }
    };
    repos.truncate(MAX_REPOS);
    Ok(repos)
}

/// The dispatchable workflows of the repositories the engine looks in.
///
/// # Errors
///
/// The listing of repositories refused or unreachable; a throttled or
/// unreachable GitHub at any point. A repository that refuses a read is left
/// out (with a warning in the log).
pub(crate) async fn discover(
    client: &Client,
    settings: &Validated,
    options: &DiscoverOptions,
) -> Result<Vec<Discovered>, EngineError> {
    let mut budget = RateBudget::default();
    let repos = repositories(client, settings, &mut budget).await?;
    let mut found = Vec::new();
    let mut files = 0;
    'repos: for repo in repos.iter().filter(|r| !r.archived) {
        let owner = repo.owner.login.as_str();
        let base = format!(
            "/repos/{}/{}",
            percent_encode(owner),
            percent_encode(&repo.name)
        );
        let listed = client
            .call(
                Method::GET,
                &format!("{base}/actions/workflows?per_page={MAX_WORKFLOWS}"),
                None,
                "actions: read",
                &mut budget,
            )
            .await
            .and_then(|a| a.json::<Workflows>());
        let list = match listed {
            Ok(list) => list,
            Err(e) if e.is_retryable() => return Err(e),
            Err(e) => {
                tracing::warn!(%owner, repo = %repo.name, error = %e, "discover: the repository's workflows cannot be listed; left out");
                continue;
            }
        };
        if list.total_count > list.workflows.len() as u64 {
            tracing::warn!(%owner, repo = %repo.name, total = list.total_count, "discover: only the first {MAX_WORKFLOWS} workflows are read");
        }
        let candidates: Vec<&Workflow> = list
            .workflows
            .iter()
            .filter(|w| w.path.starts_with(".github/workflows/"))
            .filter(|w| w.state == "active" || (options.all && w.state.starts_with("disabled")))
            .collect();
        if candidates.is_empty() {
            continue;
        }
        let git_ref = repo.default_branch.as_deref().unwrap_or("main");
        let environments = match client
            .call(
                Method::GET,
                &format!("{base}/environments?per_page=100"),
                None,
                "actions: read",
                &mut budget,
            )
            .await
            .and_then(|a| a.json::<Environments>())
        {
            Ok(list) => Some(list.environments),
            Err(e) if e.is_retryable() => return Err(e),
            Err(e) => {
                tracing::warn!(%owner, repo = %repo.name, error = %e, "discover: the repository's environments cannot be read");
                None
            }
        };
        for wf in candidates {
            if files == MAX_FILES {
                tracing::warn!("discover: only the first {MAX_FILES} workflow files are read");
                break 'repos;
            }
            files += 1;
            let path = format!(
                "{base}/contents/{}?ref={}",
                percent_encode_path(&wf.path),
                percent_encode(git_ref)
            );
            let yaml = match client
                .call(Method::GET, &path, None, "contents: read", &mut budget)
                .await
                .and_then(|a| a.json::<Value>())
                .map(|c| decode_content(&c))
            {
                Ok(Some(yaml)) => yaml,
                Ok(None) => {
                    tracing::warn!(%owner, repo = %repo.name, path = %wf.path, "discover: the workflow file is not base64 UTF-8 text; left out");
                    continue;
                }
                Err(e) if e.is_retryable() => return Err(e),
                Err(e) => {
                    tracing::warn!(%owner, repo = %repo.name, path = %wf.path, error = %e, "discover: the workflow file cannot be read; left out");
                    continue;
                }
            };
            let place = Place {
                owner,
                repo: &repo.name,
                git_ref,
                environments: environments.as_deref(),
            };
            if let Some(tool) = tool_for(&place, wf, &yaml) {
                found.push(tool);
            }
        }
    }
    Ok(found)
}

/// The text of a contents answer (base64, wrapped in lines).
fn decode_content(contents: &Value) -> Option<String> {
    let encoded: String = contents
        .get("content")
        .and_then(Value::as_str)?
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    String::from_utf8(bytes).ok()
}

/// Where a workflow lives.
struct Place<'a> {
    owner: &'a str,
    repo: &'a str,
    git_ref: &'a str,
    /// The repository's environments, when they could be read.
    environments: Option<&'a [Environment]>,
}

/// The workflow input `discover` reads as the trace-context carrier.
const TRACE_INPUT: &str = "traceparent";

/// The tool for one workflow file; `None` when it has no `workflow_dispatch`
/// trigger (or is not a workflow). Pure.
fn tool_for(place: &Place<'_>, wf: &Workflow, yaml: &str) -> Option<Discovered> {
    let corr = DEFAULT_CORRELATION_INPUT;
    let declared = match workflow::declared_inputs(yaml) {
        Ok(d) => d,
        Err(WorkflowError::NotDispatchable) => return None,
        Err(e) => {
            tracing::warn!(path = %wf.path, error = %e, "discover: left out");
            return None;
        }
    };
    // A declared `traceparent` input carries taskgate's trace context into
    // the run (`trace_input`), so it is no argument of the tool.
    let traced = declared.contains_key(TRACE_INPUT);
    let reserved: &[&str] = if traced {
        &[corr, TRACE_INPUT]
    } else {
        &[corr]
    };
    let mut schema = workflow::suggest_input_schema(yaml, reserved).ok()?;
    let environments = place.environments.unwrap_or_default();
    // An `environment` input takes the name of one of the repository's
    // environments.
    let names: Vec<&str> = environments.iter().map(|e| e.name.as_str()).collect();
    for (name, input) in &declared {
        if input.kind == "environment" && name != corr && !names.is_empty() {
            schema["properties"][name]["enum"] = json!(names);
        }
    }
    let file = wf.path.rsplit('/').next().unwrap_or_default();
    let plain_file = !file.is_empty()
        && file.len() <= 100
        && (file.ends_with(".yml") || file.ends_with(".yaml"))
        && file
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'));
    let mut target = json!({
        "owner": place.owner,
        "repo": place.repo,
        "workflow": if plain_file { json!(file) } else { json!(wf.id) },
        "ref": place.git_ref,
    });
    let mut notes = Vec::new();
    if traced {
        target["trace_input"] = json!(TRACE_INPUT);
        notes.push(format!(
            "the workflow declares a {TRACE_INPUT} input: trace_input = \"{TRACE_INPUT}\" passes taskgate's trace context into the run"
        ));
    }
    if wf.state != "active" {
        notes.push(format!(
            "the workflow is {}: GitHub refuses its dispatches until it is enabled",
            wf.state
        ));
    }
    if declared.contains_key(corr) && yaml.contains(&format!("inputs.{corr}")) {
        target["correlate"] = json!("always");
        notes.push(format!(
            "the workflow puts inputs.{corr} in its run-name: correlate = \"always\", so a retried call finds its run"
        ));
    } else {
        notes.push(format!(
            "declare a {corr} input and put it in the run-name (run-name: \"… ${{{{ inputs.{corr} }}}}\") to let retried calls find their run (correlate = \"always\")"
        ));
    }
    let used = workflow::job_environments(yaml);
    let any_environment = used.iter().any(|u| u.contains("${{"))
        || declared.values().any(|i| i.kind == "environment");
    for env in environments {
        let Some(no_self_review) = env.reviewers() else {
            continue;
        };
        if !(any_environment || used.contains(&env.name)) {
            continue;
        }
        notes.push(format!(
            "environment {:?} requires a reviewer's approval{}: runs wait for it on GitHub; to ask the client instead add environment_approval = {{}} to the target, with four_eyes = true (the caller cannot approve their own run) and mode = \"async\"",
            env.name,
            if no_self_review { " (not by the one who started the run)" } else { "" }
        ));
    }
    if place.environments.is_none() && !used.is_empty() {
        notes.push(
            "the repository's environments could not be read: check whether they require reviewers"
                .to_owned(),
        );
    }
    let title = if wf.name.trim().is_empty() {
        file.trim_end_matches(".yaml").trim_end_matches(".yml")
    } else {
        wf.name.as_str()
    };
    Some(Discovered {
        name: title.to_owned(),
        description: format!(
            "Runs the GitHub Actions workflow {title:?} of {}/{} (on {})",
            place.owner, place.repo, place.git_ref
        ),
        origin: format!(
            "GitHub workflow {title:?} ({}) in {}/{}",
            wf.path, place.owner, place.repo
        ),
        target,
        input_schema: schema,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Value {
        let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    /// The published payloads read as the shapes discover expects.
    #[test]
    fn published_payloads_parse() {
        let repos: Vec<Repo> = serde_json::from_value(fixture("repository-items.json")).unwrap();
        assert_eq!(repos[0].owner.login, "octocat");
        assert_eq!(repos[0].default_branch.as_deref(), Some("master"));
        let inst: InstallationRepos =
            serde_json::from_value(fixture("installation-repositories.json")).unwrap();
        assert!(!inst.repositories.is_empty());
        let _: Repo = serde_json::from_value(fixture("full-repository.json")).unwrap();
        let wfs: Workflows = serde_json::from_value(fixture("workflow-paginated.json")).unwrap();
        assert_eq!(wfs.workflows.len(), 2);
        let envs: Environments = serde_json::from_value(fixture("environments.json")).unwrap();
        assert_eq!(envs.environments[0].reviewers(), Some(false));
    }

    fn wf(name: &str, path: &str, state: &str) -> Workflow {
        Workflow {
            id: 161_335,
            name: name.to_owned(),
            path: path.to_owned(),
            state: state.to_owned(),
        }
    }

    #[test]
    fn a_dispatchable_workflow_becomes_a_tool() {
        let envs: Environments = serde_json::from_value(fixture("environments.json")).unwrap();
        let place = Place {
            owner: "octo-org",
            repo: "octo-repo",
            git_ref: "main",
            environments: Some(&envs.environments),
        };
        let yaml = "name: Deploy\nrun-name: \"deploy ${{ inputs.taskgate_run }}\"\non:\n  workflow_dispatch:\n    inputs:\n      target:\n        type: environment\n        required: true\n      version:\n        type: string\n        description: What to ship\n        required: true\n      taskgate_run:\n        type: string\njobs:\n  a:\n    environment: ${{ inputs.target }}\n    runs-on: x\n";
        let tool = tool_for(
            &place,
            &wf("Deploy", ".github/workflows/deploy.yml", "active"),
            yaml,
        )
        .unwrap();
        assert_eq!(tool.name, "Deploy");
        assert_eq!(
            tool.target,
            json!({"owner": "octo-org", "repo": "octo-repo", "workflow": "deploy.yml", "ref": "main", "correlate": "always"})
        );
        assert_eq!(
            tool.input_schema["properties"]["target"]["enum"],
            json!(["staging"])
        );
        assert_eq!(tool.input_schema["required"], json!(["target", "version"]));
        assert!(tool.input_schema["properties"]
            .get("taskgate_run")
            .is_none());
        let notes = tool.notes.join("\n");
        assert!(notes.contains("\"staging\" requires a reviewer"), "{notes}");
        // Not dispatchable: no tool.
        assert!(tool_for(
            &place,
            &wf("CI", ".github/workflows/ci.yml", "active"),
            "on: push\njobs: {}\n"
        )
        .is_none());
        // A file name the target cannot take: the workflow id instead.
        let odd = tool_for(
            &place,
            &wf("", ".github/workflows/my deploy.yml", "disabled_manually"),
            "on: workflow_dispatch\n",
        )
        .unwrap();
        assert_eq!(odd.target["workflow"], json!(161_335));
        assert!(odd.target.get("correlate").is_none());
        assert!(
            odd.notes[0].contains("disabled_manually"),
            "{:?}",
            odd.notes
        );
        assert_eq!(odd.name, "my deploy");
    }
}
