//! Engine settings (`[engines.NAME]` with `kind = "kubernetes"`) and the tool
//! target (`target = { … }` of a tool on such an engine). The doc comments of these
//! structs are the user documentation; `README.md` repeats them with examples.

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::batch::v1::Job;
use serde::Deserialize;
use serde_json::Value;
use taskgate_engine::{from_value, ConfigError};

/// The settings of a Kubernetes engine.
///
/// ```toml
/// [engines.cluster]
/// kind = "kubernetes"
/// # kubeconfig = "/etc/taskgate/kubeconfig"   # default: in-cluster, else $KUBECONFIG, else ~/.kube/config
/// # context = "prod"                          # default: the kubeconfig's current context
/// namespace = "pipelines"                     # default: the context's namespace, else the pod's, else "default"
/// ```
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct EngineSettings {
    /// Path of a kubeconfig file. When unset, kube's inference applies: the file
    /// named by `$KUBECONFIG` or `~/.kube/config` when there is one, else the
    /// in-cluster service account (token, CA and namespace of the pod).
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its `current-context`). Not allowed
    /// without a kubeconfig file.
    pub context: Option<String>,
    /// The namespace every Job of this engine lives in (default: the context's
    /// namespace, or the pod's namespace in-cluster, or `default`).
    pub namespace: Option<String>,
}

impl EngineSettings {
    /// Deserializes and validates the settings table.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] keyed by the offending setting.
    pub(crate) fn from_value(settings: Value) -> Result<Self, ConfigError> {
        let settings: Self = from_value(settings)?;
        if let Some(ns) = &settings.namespace {
            check_dns_label(ns).map_err(|m| ConfigError::new("namespace", m))?;
        }
        if let Some(path) = &settings.kubeconfig {
            if path.as_os_str().is_empty() {
                return Err(ConfigError::new("kubeconfig", "must not be empty"));
            }
        }
        if let Some(context) = &settings.context {
            if context.is_empty() {
                return Err(ConfigError::new("context", "must not be empty"));
            }
        }
        Ok(settings)
    }
}

/// A tool's target: the Job template and how a call fills it in.
///
/// ```toml
/// target = { template_file = "jobs/report.yaml", container = "main", args_env_prefix = "ARG_", args_json_env = "TASKGATE_ARGUMENTS" }
/// # or: run a CronJob's job template on demand, as `kubectl create job --from=cronjob/nightly-report` does
/// target = { from_cronjob = "nightly-report", env_arguments = ["REGION"] }
/// ```
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ToolTarget {
    /// Path of a YAML (or JSON) file holding one `batch/v1` Job, relative to the
    /// folder taskgate starts in. Exactly one of `template_file`, `template` and
    /// `from_cronjob`.
    pub template_file: Option<PathBuf>,
    /// The Job inline: a YAML string or a TOML table shaped like the Job object.
    pub template: Option<InlineTemplate>,
    /// The name of a `batch/v1` CronJob in the engine's namespace whose
    /// `spec.jobTemplate` each call runs once, now: the Job gets the
    /// annotation `cronjob.kubernetes.io/instantiate: manual` and the CronJob
    /// as its controlling owner, as `kubectl create job --from=cronjob/NAME`
    /// makes it. The CronJob is read at every start (one GET, within the
    /// call's deadline; taskgate needs `get cronjobs.batch`), so the Job
    /// follows the CronJob's current template; the options below are checked
    /// against it then, and a start fails with invalid input when they do not
    /// fit it (or the CronJob is gone). A retried start with the same run name
    /// and arguments finds the Job it made even when the CronJob was edited
    /// in between; other arguments under that name are a conflict. The
    /// CronJob controller counts these Jobs in its history: a finished one
    /// beyond `successfulJobsHistoryLimit`/`failedJobsHistoryLimit` is
    /// deleted by it, and its task then reads as not found.
    pub from_cronjob: Option<String>,
    /// Variables of the container's own `env` that an argument of the same
    /// name replaces (each must have a literal `value`, never `valueFrom`):
    /// the operator's explicit opt-in, for CronJobs whose settings live in
    /// their environment (`taskgate discover --args-from-env` writes it). The
    /// value is the argument as the shared mapping renders it (a string as it
    /// is, other values as JSON); an argument the call leaves out keeps the
    /// template's value. No other argument ever replaces a template variable.
    #[serde(default)]
    pub env_arguments: Vec<String>,
    /// The container that receives the arguments and whose termination message is
    /// the result (default: the first container of the pod template).
    pub container: Option<String>,
    /// Each top-level argument becomes an environment variable named
    /// `<prefix><KEY>` (the key upper-cased, anything but ASCII letters and
    /// digits turned into `_`); strings as they are, `null` as an empty string,
    /// other values as JSON (the mapping every engine shares). Must not be empty,
    /// and no variable of the container's own `env` may start with it, so an
    /// argument never replaces one; two arguments that map to one name are
    /// refused. Variables from `envFrom` sources yield to `env`: keep their names
    /// off this prefix too.
    pub args_env_prefix: Option<String>,
    /// All arguments, as one JSON document, in this environment variable. When
    /// neither this nor `args_env_prefix` is set, arguments go to
    /// `TASKGATE_ARGUMENTS`. Must not be a variable of the container's own, nor
    /// start with `args_env_prefix`.
    pub args_json_env: Option<String>,
    /// An approval gate: the Job is created suspended and the task asks the client
    /// this question (input request key `approval`); accept resumes the Job,
    /// decline or dismiss deletes it. It is an approval: never answered inside
    /// the call that started the run, and with the tool's `four_eyes` not by
    /// its starter; the tool's `answer_access` says who may answer.
    pub approval: Option<Approval>,
    /// What cancelling a task does: `stop` (default; `delete` is its former
    /// name) ends the Job through its own deadline (its pods are deleted, the
    /// Job stays marked `taskgate.io/cancelled`, reads as cancelled and is
    /// removed by its TTL, the tool's keep_alive); `suspend` suspends it (its
    /// pods are stopped; the Job stays, reads as cancelled, and is removed by
    /// hand: a suspended Job never finishes, so no TTL applies).
    #[serde(default)]
    pub cancel: CancelMode,
    /// How many lines of the pod's log a finished task's result carries
    /// (default 20, at most 1000; 0 leaves the log out).
    pub log_lines: Option<u32>,
}

/// An inline Job template: YAML text or a table.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum InlineTemplate {
    /// YAML (or JSON) text of one Job.
    Yaml(String),
    /// The Job as a table.
    Table(BTreeMap<String, Value>),
}

/// The question of an approval gate.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Approval {
    /// The question shown to a person.
    pub message: String,
    /// JSON Schema of the answer (a flat object schema); default: an empty object
    /// schema (a plain yes/no).
    pub schema: Option<Value>,
}

/// What a cancel does to the Job.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CancelMode {
    /// One merge patch: the annotation `taskgate.io/cancelled: "true"`,
    /// `spec.activeDeadlineSeconds: 1`, `spec.parallelism: 0` and
    /// `spec.suspend: false`. The Job controller deletes the pods and ends the
    /// Job (`Failed`, `DeadlineExceeded`), which then reads as cancelled until
    /// `ttlSecondsAfterFinished` removes it. A Job waiting for approval ends
    /// the same way without ever making a pod (parallelism 0). `delete`, the
    /// earlier name of this mode, means the same: a Job deleted at once would
    /// read "not found" instead of cancelled.
    #[default]
    #[serde(alias = "delete")]
    Stop,
    /// Set `spec.suspend = true`: the Job controller stops its pods.
    Suspend,
}

/// The default environment variable of the arguments as JSON.
pub(crate) const DEFAULT_ARGS_JSON_ENV: &str = "TASKGATE_ARGUMENTS";
/// Log lines in a result when the tool does not say.
pub(crate) const DEFAULT_LOG_LINES: u32 = 20;
/// The most log lines a tool may ask for.
pub(crate) const MAX_LOG_LINES: u32 = 1000;

/// Where a tool's Job template comes from.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    /// The configured template, parsed and checked when the tool was bound.
    Template(Box<Job>),
    /// The `spec.jobTemplate` of this CronJob, read at each start.
    CronJob(String),
}

/// A validated target: the Job template (or where to read it) and the
/// resolved options.
#[derive(Debug, Clone)]
pub(crate) struct Bound {
    /// The Job template, or the CronJob to read it from.
    pub source: Source,
    /// The target as configured: a CronJob's template is checked against it at
    /// each start.
    pub target: ToolTarget,
    /// The container receiving the arguments: resolved for a configured
    /// template; for a CronJob the configured one, if any (else the first
    /// container of the Job).
    pub container: Option<String>,
    /// `env_arguments`.
    pub env_arguments: Vec<String>,
    /// `args_env_prefix`, if any.
    pub args_env_prefix: Option<String>,
    /// The JSON environment variable, if any (the default applied).
    pub args_json_env: Option<String>,
    /// The approval gate, with its schema defaulted.
    pub approval: Option<ApprovalGate>,
    /// What a cancel does.
    pub cancel: CancelMode,
    /// Log lines in a result.
    pub log_lines: u32,
}

/// An approval gate with its schema resolved.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ApprovalGate {
    /// The question.
    pub message: String,
    /// The answer's JSON Schema.
    pub schema: Value,
}

impl ToolTarget {
    /// Validates the target: loads and parses the template, checks that it is a
    /// `batch/v1` Job with a pod template, that the named container exists, that
    /// its namespace (if any) is `namespace`, and that the options make sense.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] keyed relative to the tool (`target.template`, …).
    pub(crate) fn validate(&self, namespace: &str) -> Result<Bound, ConfigError> {
        let sources = [
            self.template_file.is_some(),
            self.template.is_some(),
            self.from_cronjob.is_some(),
        ];
        if sources.iter().filter(|s| **s).count() != 1 {
            return Err(ConfigError::new(
                "target",
                "set exactly one of template_file, template and from_cronjob",
            ));
        }
        for (i, name) in self.env_arguments.iter().enumerate() {
            if !is_env_name(name) {
                return Err(ConfigError::new(
                    format!("target.env_arguments[{i}]"),
                    "must be letters, digits and _ and not start with a digit",
                ));
            }
            if self.env_arguments[..i].contains(name) {
                return Err(ConfigError::new(
                    format!("target.env_arguments[{i}]"),
                    format!("{name} is named twice"),
                ));
            }
        }
        let (source, container) = if let Some(cronjob) = &self.from_cronjob {
            check_object_name(cronjob).map_err(|m| ConfigError::new("target.from_cronjob", m))?;
            if let Some(name) = &self.container {
                if check_dns_label(name).is_err() {
                    return Err(ConfigError::new(
                        "target.container",
                        format!("{name:?} is not a container name"),
                    ));
                }
            }
            self.check_options(&[])?;
            (Source::CronJob(cronjob.clone()), self.container.clone())
        } else {
            let template = self.load_template(namespace)?;
            let key = if self.template_file.is_some() {
                "target.template_file"
            } else {
                "target.template"
            };
            let container = self.check_template(&template, key)?;
            (Source::Template(Box::new(template)), Some(container))
        };
        let args_json_env = match (&self.args_env_prefix, &self.args_json_env) {
            (None, None) => Some(DEFAULT_ARGS_JSON_ENV.to_owned()),
            (_, json) => json.clone(),
        };
        let approval = match &self.approval {
            None => None,
            Some(a) => {
                if a.message.trim().is_empty() {
                    return Err(ConfigError::new(
                        "target.approval.message",
                        "must not be empty",
                    ));
                }
                let schema = a
                    .schema
                    .clone()
                    .unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}}));
                if schema.get("type").and_then(Value::as_str) != Some("object") {
                    return Err(ConfigError::new(
                        "target.approval.schema",
                        "must be an object schema (type = \"object\")",
                    ));
                }
                Some(ApprovalGate {
                    message: a.message.clone(),
                    schema,
                })
            }
        };
        let log_lines = self.log_lines.unwrap_or(DEFAULT_LOG_LINES);
        if log_lines > MAX_LOG_LINES {
            return Err(ConfigError::new(
                "target.log_lines",
                format!("at most {MAX_LOG_LINES}"),
            ));
        }
        Ok(Bound {
            source,
            target: self.clone(),
            container,
            env_arguments: self.env_arguments.clone(),
            args_env_prefix: self.args_env_prefix.clone(),
            args_json_env,
            approval,
            cancel: self.cancel,
            log_lines,
        })
    }

    /// Loads and parses the configured template (`template_file` or `template`).
    fn load_template(&self, namespace: &str) -> Result<Job, ConfigError> {
        let (key, value) = match (&self.template_file, &self.template) {
            (Some(path), _) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    ConfigError::new(
                        "target.template_file",
                        format!("cannot read {}: {e}", path.display()),
                    )
                })?;
                ("target.template_file", parse_yaml(&text))
            }
            (None, Some(InlineTemplate::Yaml(text))) => ("target.template", parse_yaml(text)),
            (None, Some(InlineTemplate::Table(table))) => (
                "target.template",
                Ok(Value::Object(table.clone().into_iter().collect())),
            ),
            (None, None) => return Err(ConfigError::new("target", "no template")),
        };
        let value = value.map_err(|m| ConfigError::new(key, m))?;
        parse_job(value, namespace).map_err(|m| ConfigError::new(key, m))
    }

    /// Checks the options against a Job template (the configured one when the
    /// tool is bound; a CronJob's at each start) and returns the container that
    /// receives the arguments. `key` names the template in errors.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] keyed relative to the tool.
    pub(crate) fn check_template(&self, template: &Job, key: &str) -> Result<String, ConfigError> {
        let containers = template
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .map(|p| p.containers.as_slice())
            .unwrap_or_default();
        let container = match &self.container {
            Some(name) => {
                if !containers.iter().any(|c| &c.name == name) {
                    return Err(ConfigError::new(
                        "target.container",
                        format!(
                            "the pod template has no container {name:?} (it has {})",
                            containers
                                .iter()
                                .map(|c| c.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                }
                name.clone()
            }
            None => containers
                .first()
                .map(|c| c.name.clone())
                .ok_or_else(|| ConfigError::new(key, "the pod template has no containers"))?,
        };
        // The container's own variables: no argument may replace one, but
        // those the operator named in env_arguments.
        let env = containers
            .iter()
            .find(|c| c.name == container)
            .and_then(|c| c.env.as_deref())
            .unwrap_or_default();
        for (i, name) in self.env_arguments.iter().enumerate() {
            match env.iter().find(|e| &e.name == name) {
                Some(var) if var.value_from.is_none() => {}
                Some(_) => {
                    return Err(ConfigError::new(
                        format!("target.env_arguments[{i}]"),
                        format!(
                            "{name} of container {container} takes its value from a source \
                             (valueFrom), which an argument may not replace"
                        ),
                    ))
                }
                None => {
                    return Err(ConfigError::new(
                        format!("target.env_arguments[{i}]"),
                        format!("container {container} has no variable {name}"),
                    ))
                }
            }
        }
        let own: Vec<&str> = env.iter().map(|e| e.name.as_str()).collect();
        self.check_options(&own)?;
        Ok(container)
    }

    /// Checks the argument options against the container's own variable
    /// names `own` (none known yet for a CronJob at bind time).
    fn check_options(&self, own: &[&str]) -> Result<(), ConfigError> {
        if let Some(prefix) = &self.args_env_prefix {
            if prefix.is_empty() {
                return Err(ConfigError::new(
                    "target.args_env_prefix",
                    "must not be empty: an argument could then replace any variable of the \
                     container (use a prefix such as \"ARG_\")",
                ));
            }
            if !is_env_name(prefix) {
                return Err(ConfigError::new(
                    "target.args_env_prefix",
                    "must be letters, digits and _ and not start with a digit",
                ));
            }
            if let Some(name) = own.iter().find(|n| n.starts_with(prefix.as_str())) {
                return Err(ConfigError::new(
                    "target.args_env_prefix",
                    format!(
                        "{prefix:?} is also the start of the container's own variable {name}, \
                         which an argument could replace; choose another prefix"
                    ),
                ));
            }
        }
        if let Some(name) = &self.args_json_env {
            if !is_env_name(name) {
                return Err(ConfigError::new(
                    "target.args_json_env",
                    "must be letters, digits and _ and not start with a digit",
                ));
            }
            if own.contains(&name.as_str()) {
                return Err(ConfigError::new(
                    "target.args_json_env",
                    format!("{name} is already a variable of the container"),
                ));
            }
            if let Some(prefix) = self.args_env_prefix.as_deref() {
                if name.starts_with(prefix) {
                    return Err(ConfigError::new(
                        "target.args_json_env",
                        format!("{name} starts with args_env_prefix {prefix:?}, where an argument could take it"),
                    ));
                }
            }
        }
        if self.args_env_prefix.is_none()
            && self.args_json_env.is_none()
            && own.contains(&DEFAULT_ARGS_JSON_ENV)
        {
            return Err(ConfigError::new(
                "target",
                format!("the container already has {DEFAULT_ARGS_JSON_ENV}: set args_json_env to another name"),
            ));
        }
        Ok(())
    }
}

fn parse_yaml(text: &str) -> Result<Value, String> {
    serde_yaml::from_str::<Value>(text).map_err(|e| format!("not a YAML document: {e}"))
}

/// Parses a Job template and checks what taskgate relies on.
fn parse_job(value: Value, namespace: &str) -> Result<Job, String> {
    if let Some(api_version) = value.get("apiVersion") {
        if api_version != "batch/v1" {
            return Err(format!("apiVersion must be batch/v1, not {api_version}"));
        }
    }
    if let Some(kind) = value.get("kind") {
        if kind != "Job" {
            return Err(format!("kind must be Job, not {kind}"));
        }
    }
    let job: Job = serde_json::from_value(value).map_err(|e| format!("not a batch/v1 Job: {e}"))?;
    if let Some(ns) = &job.metadata.namespace {
        if ns != namespace {
            return Err(format!(
                "metadata.namespace is {ns:?} but the engine's namespace is {namespace:?}; leave it out"
            ));
        }
    }
    let Some(spec) = &job.spec else {
        return Err("the Job has no spec".into());
    };
    if spec
        .template
        .spec
        .as_ref()
        .is_none_or(|p| p.containers.is_empty())
    {
        return Err("spec.template.spec.containers is empty".into());
    }
    Ok(job)
}

/// True for a C-identifier-like environment variable name.
fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Checks an object name that is an RFC 1123 DNS subdomain of at most 52
/// characters (a CronJob's name: its Jobs' names add 11).
///
/// # Errors
///
/// What is wrong with `name`.
pub(crate) fn check_object_name(name: &str) -> Result<(), String> {
    let ok = name.len() <= 52 && name.split('.').all(|part| check_dns_label(part).is_ok());
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a CronJob name (lowercase letters, digits, '-' and '.', at most 52)"
        ))
    }
}

/// Checks an RFC 1123 DNS label (namespaces, Job names).
///
/// # Errors
///
/// What is wrong with `name`.
pub(crate) fn check_dns_label(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a DNS label (lowercase letters, digits and '-', at most 63, starting and ending alphanumeric)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const YAML: &str = "apiVersion: batch/v1\nkind: Job\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n      - name: main\n        image: busybox\n      - name: side\n        image: busybox\n";

    /// A template whose container has a variable of its own from a Secret.
    const OWN_ENV: &str = "apiVersion: batch/v1\nkind: Job\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n      - name: main\n        image: busybox\n        env:\n        - name: DB_PASSWORD\n          valueFrom: {secretKeyRef: {name: db, key: password}}\n";

    fn target(v: Value) -> Result<Bound, ConfigError> {
        from_value::<ToolTarget>(v)
            .map_err(|e| e.within("target"))?
            .validate("ns")
    }

    #[test]
    fn settings_are_checked() {
        assert_eq!(
            EngineSettings::from_value(json!({"bogus": 1}))
                .unwrap_err()
                .key,
            "bogus"
        );
        assert_eq!(
            EngineSettings::from_value(json!({"namespace": "Bad_NS"}))
                .unwrap_err()
                .key,
            "namespace"
        );
        let s = EngineSettings::from_value(json!({"namespace": "jobs", "context": "c"})).unwrap();
        assert_eq!(s.namespace.as_deref(), Some("jobs"));
    }

    #[test]
    fn a_yaml_template_binds_with_defaults() {
        let b = target(json!({"template": YAML})).unwrap();
        assert_eq!(b.container.as_deref(), Some("main"));
        assert_eq!(b.args_json_env.as_deref(), Some(DEFAULT_ARGS_JSON_ENV));
        assert_eq!(b.cancel, CancelMode::Stop);
        assert_eq!(b.log_lines, DEFAULT_LOG_LINES);
        let b = target(json!({"template": YAML, "container": "side", "args_env_prefix": "ARG_", "cancel": "suspend"})).unwrap();
        assert_eq!(b.container.as_deref(), Some("side"));
        assert_eq!(b.args_json_env, None);
        assert_eq!(b.cancel, CancelMode::Suspend);
    }

    #[test]
    fn a_table_template_binds() {
        let table = json!({"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}});
        let b = target(json!({"template": table, "approval": {"message": "Go?"}})).unwrap();
        assert_eq!(b.container.as_deref(), Some("c"));
        assert_eq!(b.approval.unwrap().schema["type"], "object");
    }

    #[test]
    fn bad_targets_name_their_key() {
        let cases = [
            (json!({}), "target"),
            (json!({"template": YAML, "template_file": "x"}), "target"),
            (
                json!({"template_file": "/nonexistent/x.yaml"}),
                "target.template_file",
            ),
            (json!({"template": "kind: Pod\n"}), "target.template"),
            (
                json!({"template": "apiVersion: batch/v1\nkind: Job\n"}),
                "target.template",
            ),
            (json!({"template": "a: [\n"}), "target.template"),
            (
                json!({"template": YAML.replace("kind: Job", "kind: Job\nmetadata:\n  namespace: other")}),
                "target.template",
            ),
            (
                json!({"template": YAML, "container": "nope"}),
                "target.container",
            ),
            (
                json!({"template": YAML, "args_json_env": "1X"}),
                "target.args_json_env",
            ),
            (
                json!({"template": YAML, "args_env_prefix": "A-"}),
                "target.args_env_prefix",
            ),
            (
                json!({"template": YAML, "args_env_prefix": ""}),
                "target.args_env_prefix",
            ),
            (
                json!({"template": OWN_ENV, "args_env_prefix": "DB_"}),
                "target.args_env_prefix",
            ),
            (
                json!({"template": OWN_ENV, "args_env_prefix": "D"}),
                "target.args_env_prefix",
            ),
            (
                json!({"template": OWN_ENV, "args_json_env": "DB_PASSWORD"}),
                "target.args_json_env",
            ),
            (
                json!({"template": YAML, "args_env_prefix": "ARG_", "args_json_env": "ARG_ALL"}),
                "target.args_json_env",
            ),
            (
                json!({"template": OWN_ENV.replace("DB_PASSWORD", "TASKGATE_ARGUMENTS")}),
                "target",
            ),
            (json!({"template": YAML, "cancel": "explode"}), "target"),
            (
                json!({"template": YAML, "log_lines": 5000}),
                "target.log_lines",
            ),
            (
                json!({"template": YAML, "approval": {"message": " "}}),
                "target.approval.message",
            ),
            (
                json!({"template": YAML, "approval": {"message": "ok", "schema": {"type": "string"}}}),
                "target.approval.schema",
            ),
            (json!({"template": YAML, "unknown": 1}), "target.unknown"),
            (json!({"template": YAML, "from_cronjob": "c"}), "target"),
            (json!({"from_cronjob": "Bad_Name"}), "target.from_cronjob"),
            (
                json!({"from_cronjob": "a".repeat(53)}),
                "target.from_cronjob",
            ),
            (
                json!({"from_cronjob": "c", "container": "A B"}),
                "target.container",
            ),
            (
                json!({"from_cronjob": "c", "env_arguments": ["1X"]}),
                "target.env_arguments[0]",
            ),
            (
                json!({"from_cronjob": "c", "env_arguments": ["X", "X"]}),
                "target.env_arguments[1]",
            ),
            (
                json!({"from_cronjob": "c", "args_env_prefix": ""}),
                "target.args_env_prefix",
            ),
            // A template variable from a Secret is never an argument's.
            (
                json!({"template": OWN_ENV, "env_arguments": ["DB_PASSWORD"]}),
                "target.env_arguments[0]",
            ),
            (
                json!({"template": YAML, "env_arguments": ["NOPE"]}),
                "target.env_arguments[0]",
            ),
        ];
        for (v, key) in cases {
            let err = target(v.clone()).unwrap_err();
            assert_eq!(err.key, key, "{v}: {err}");
        }
    }

    #[test]
    fn a_cronjob_target_binds_without_a_template() {
        let b =
            target(json!({"from_cronjob": "nightly.report", "env_arguments": ["REGION"]})).unwrap();
        assert!(matches!(&b.source, Source::CronJob(n) if n == "nightly.report"));
        assert_eq!(b.container, None);
        assert_eq!(b.env_arguments, ["REGION"]);
        assert_eq!(b.args_json_env.as_deref(), Some(DEFAULT_ARGS_JSON_ENV));
    }

    #[test]
    fn dns_labels() {
        assert!(check_dns_label("tg-abc1").is_ok());
        for bad in ["", "-a", "a-", "A", "a_b", &"a".repeat(64)] {
            assert!(check_dns_label(bad).is_err(), "{bad}");
        }
    }
}
