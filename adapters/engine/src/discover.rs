//! What an engine reports to `taskgate discover`: the pipelines it already
//! runs, each as a tool entry an operator can paste into the config.

use serde_json::Value;

/// What `taskgate discover` asks of an engine.
#[derive(Debug, Clone, Default)]
pub struct DiscoverOptions {
    /// Include what the engine has switched off (paused Airflow DAGs,
    /// disabled GitHub workflows, suspended CronJobs).
    pub all: bool,
    /// How many recent runs an engine may read to infer an input schema when
    /// the pipeline declares none (Step Functions); 0 reads none. Only the
    /// shape of sampled inputs is used, never their values.
    pub sample: usize,
    /// Kubernetes CronJobs: make the job template's container environment
    /// into declared arguments (off: the tool takes the template as it is).
    pub args_from_env: bool,
}

/// A pipeline an engine already runs, as a tool taskgate could expose.
#[derive(Debug, Clone, PartialEq)]
pub struct Discovered {
    /// A name suggestion; the server makes it a valid, unique tool name.
    pub name: String,
    /// The tool's description for clients.
    pub description: String,
    /// Where it came from, one line (it becomes a comment above the entry),
    /// e.g. `GitHub workflow .github/workflows/deploy.yml in acme/app`.
    pub origin: String,
    /// The tool's `target` table, as the engine's `bind` accepts it.
    pub target: Value,
    /// The tool's input schema (JSON Schema 2020-12).
    pub input_schema: Value,
    /// Notes for the operator, one comment line each: an environment with
    /// required reviewers, a schema inferred from N runs, a human step.
    pub notes: Vec<String>,
}
