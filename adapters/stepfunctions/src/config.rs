//! Settings of a Step Functions engine (`[engines.NAME]` with `kind = "stepfunctions"`)
//! and of a tool bound to it (the tool's `target` table). The doc comments of the
//! fields are the user documentation.

use serde::Deserialize;
use serde_json::Value;
use taskgate_engine::ConfigError;

/// `[engines.NAME]` with `kind = "stepfunctions"`.
///
/// Credentials come from the standard AWS chain: environment variables
/// (`AWS_ACCESS_KEY_ID`, …), the shared config and credentials files (optionally the
/// named `profile`), web identity (EKS IRSA: `AWS_ROLE_ARN` +
/// `AWS_WEB_IDENTITY_TOKEN_FILE`), ECS container credentials and the EC2 instance
/// role. With `assume_role_arn`, those credentials are used to assume that role.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct EngineSettings {
    /// The AWS region of the state machines, such as `us-east-1`. Required.
    pub region: String,
    /// A custom Step Functions endpoint (a VPC endpoint, or an emulator such as
    /// `http://127.0.0.1:5005`). Default: the public regional endpoint.
    #[serde(default)]
    pub endpoint_url: Option<String>,
    /// A named profile of the shared AWS config files to take credentials from.
    /// Default: `AWS_PROFILE`, then `default`.
    #[serde(default)]
    pub profile: Option<String>,
    /// An IAM role to assume (with STS AssumeRole) using the chain's credentials,
    /// such as `arn:aws:iam::123456789012:role/taskgate`.
    #[serde(default)]
    pub assume_role_arn: Option<String>,
    /// The external ID the role's trust policy requires. Only with `assume_role_arn`.
    #[serde(default)]
    pub external_id: Option<String>,
    /// The role session name. Only with `assume_role_arn`. Default: `taskgate`.
    #[serde(default)]
    pub session_name: Option<String>,
}

impl EngineSettings {
    /// Deserializes and validates the engine table (without `kind` and
    /// `call_timeout`, which the server strips).
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] keyed by the offending setting.
    pub(crate) fn from_value(settings: Value) -> Result<Self, ConfigError> {
        let settings: Self = taskgate_engine::from_value(settings)?;
        settings.validate()?;
        Ok(settings)
    }

    /// Checks the values.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] keyed by the offending setting.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !is_region(&self.region) {
            return Err(ConfigError::new(
                "region",
                format!(
                    "{:?} is not an AWS region name (such as \"us-east-1\")",
                    self.region
                ),
            ));
        }
        if let Some(url) = &self.endpoint_url {
            let rest = url
                .strip_prefix("https://")
                .or_else(|| url.strip_prefix("http://"));
            if rest.is_none_or(str::is_empty) {
                return Err(ConfigError::new(
                    "endpoint_url",
                    format!("{url:?} is not an http:// or https:// URL"),
                ));
            }
        }
        if let Some(profile) = &self.profile {
            if profile.trim().is_empty() {
                return Err(ConfigError::new("profile", "must not be empty"));
            }
        }
        match &self.assume_role_arn {
            Some(arn) => {
                let parts: Vec<&str> = arn.splitn(6, ':').collect();
                let ok = parts.len() == 6
                    && parts[0] == "arn"
                    && parts[2] == "iam"
                    && parts[5].starts_with("role/")
                    && parts[5].len() > "role/".len();
                if !ok {
                    return Err(ConfigError::new(
                        "assume_role_arn",
                        format!(
                            "{arn:?} is not an IAM role ARN (such as \"arn:aws:iam::123456789012:role/taskgate\")"
                        ),
                    ));
                }
            }
            None => {
                for (key, set) in [
                    ("external_id", self.external_id.is_some()),
                    ("session_name", self.session_name.is_some()),
                ] {
                    if set {
                        return Err(ConfigError::new(key, "only allowed with assume_role_arn"));
                    }
                }
            }
        }
        if let Some(id) = &self.external_id {
            if id.len() < 2 || id.len() > 1224 {
                return Err(ConfigError::new(
                    "external_id",
                    "must be 2 to 1224 characters",
                ));
            }
        }
        if let Some(name) = &self.session_name {
            let ok = (2..=64).contains(&name.len())
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+=,.@-_".contains(c));
            if !ok {
                return Err(ConfigError::new(
                    "session_name",
                    "must be 2 to 64 characters of letters, digits and +=,.@-_",
                ));
            }
        }
        Ok(())
    }
}

fn is_region(region: &str) -> bool {
    !region.is_empty()
        && region.len() <= 32
        && region.starts_with(|c: char| c.is_ascii_lowercase())
        && region
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// A tool's `target` table: which state machine a call starts, and how.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ToolTarget {
    /// The ARN of a Standard state machine, such as
    /// `arn:aws:states:us-east-1:123456789012:stateMachine:Analyze`. A version or
    /// alias ARN (`…:stateMachine:Analyze:3`, `…:stateMachine:Analyze:prod`) starts
    /// that version or alias. Must be in the engine's region.
    pub state_machine_arn: String,
    /// When set, the execution input is `{ "<input_key>": <tool arguments> }`.
    /// Default: the tool arguments are the execution input as they are.
    #[serde(default)]
    pub input_key: Option<String>,
    /// Declares a `.waitForTaskToken` task state as a human step: while the
    /// execution waits there, the task asks the client for input. The question
    /// is an approval (the tool's `answer_access` and `four_eyes` apply).
    #[serde(default)]
    pub human_step: Option<HumanStep>,
    /// When true, the status of a running execution names the state it is in
    /// (`running: in state Pause`), at the cost of one `GetExecutionHistory` page
    /// per poll. Default false: a poll is one `DescribeExecution` (with a
    /// `human_step`, the history is read anyway, and the state is named).
    #[serde(default)]
    pub state_in_status: bool,
}

/// `target.human_step`: a `.waitForTaskToken` task state that waits for a person.
///
/// The state's `Parameters` must put the task token (`$$.Task.Token`) somewhere
/// (for example into an SQS message body). An accepted answer is sent with
/// SendTaskSuccess (its content becomes the task's output); a declined or dismissed
/// one with SendTaskFailure, error `taskgate.Declined`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HumanStep {
    /// The name of the task state, as written in the state machine definition.
    pub state: String,
    /// The question shown to the person.
    pub message: String,
    /// The JSON Schema of the answer: a flat object schema, as MCP elicitation
    /// requires. Default: an object with no declared properties.
    #[serde(default = "empty_object_schema")]
    pub schema: Value,
    /// Where the task token sits in the state's resolved `Parameters`, as a JSON
    /// pointer (such as `/MessageBody/taskToken`). JSON held in a string along the
    /// way is looked into. Default: the first field named `taskToken`, `TaskToken`,
    /// `token` or `task_token` (any case) found anywhere in the parameters.
    #[serde(default)]
    pub token_pointer: Option<String>,
}

fn empty_object_schema() -> Value {
    serde_json::json!({ "type": "object", "properties": {} })
}

/// A parsed state machine ARN:
/// `arn:PARTITION:states:REGION:ACCOUNT:stateMachine:NAME[:QUALIFIER]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StateMachineArn {
    /// `aws`, `aws-cn`, `aws-us-gov`, …
    pub partition: String,
    /// The region.
    pub region: String,
    /// The account id.
    pub account: String,
    /// The state machine's name.
    pub name: String,
    /// A version number or alias name, when the ARN carries one.
    pub qualifier: Option<String>,
}

impl StateMachineArn {
    /// Parses a state machine ARN.
    ///
    /// # Errors
    ///
    /// A message saying what is wrong.
    pub fn parse(arn: &str) -> Result<Self, String> {
        let parts: Vec<&str> = arn.split(':').collect();
        let shape = "expected arn:aws:states:REGION:ACCOUNT:stateMachine:NAME";
        if parts.len() < 7 || parts.len() > 8 {
            return Err(format!("{arn:?} is not a state machine ARN ({shape})"));
        }
        if parts[0] != "arn" || parts[2] != "states" || parts[5] != "stateMachine" {
            return Err(format!("{arn:?} is not a state machine ARN ({shape})"));
        }
        let (partition, region, account, name) = (parts[1], parts[3], parts[4], parts[6]);
        if partition.is_empty() || !is_region(region) {
            return Err(format!("{arn:?}: bad partition or region ({shape})"));
        }
        if account.len() != 12 || !account.chars().all(|c| c.is_ascii_digit()) {
            return Err(format!("{arn:?}: the account must be 12 digits"));
        }
        if !is_sfn_name(name) {
            return Err(format!(
                "{arn:?}: the state machine name must be 1 to 80 characters of letters, digits, - and _"
            ));
        }
        let qualifier = match parts.get(7) {
            Some(q) if q.is_empty() || !is_sfn_name(q) => {
                return Err(format!("{arn:?}: bad version or alias"))
            }
            Some(q) => Some((*q).to_owned()),
            None => None,
        };
        Ok(Self {
            partition: partition.to_owned(),
            region: region.to_owned(),
            account: account.to_owned(),
            name: name.to_owned(),
            qualifier,
        })
    }

    /// The ARN without version or alias: what DescribeStateMachine reports on.
    #[must_use]
    pub fn unqualified(&self) -> String {
        format!(
            "arn:{}:states:{}:{}:stateMachine:{}",
            self.partition, self.region, self.account, self.name
        )
    }

    /// The prefix every execution ARN of this state machine starts with
    /// (`arn:…:execution:NAME:`).
    #[must_use]
    pub fn execution_prefix(&self) -> String {
        format!(
            "arn:{}:states:{}:{}:execution:{}:",
            self.partition, self.region, self.account, self.name
        )
    }

    /// The ARN of this state machine's execution named `execution_name`:
    /// `arn:PARTITION:states:REGION:ACCOUNT:execution:NAME:EXECUTION` (executions of
    /// a version or alias carry the unqualified machine name).
    #[must_use]
    pub fn execution_arn(&self, execution_name: &str) -> String {
        format!("{}{execution_name}", self.execution_prefix())
    }
}

/// Step Functions names: 1 to 80 characters; taskgate keeps to the safe subset
/// (letters, digits, `-`, `_`).
fn is_sfn_name(name: &str) -> bool {
    (1..=80).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

impl ToolTarget {
    /// Checks the values against the engine's region. Returns the parsed ARN.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] keyed relative to the tool (`target.…`).
    pub(crate) fn validate(&self, region: &str) -> Result<StateMachineArn, ConfigError> {
        let arn = StateMachineArn::parse(&self.state_machine_arn)
            .map_err(|m| ConfigError::new("target.state_machine_arn", m))?;
        if arn.region != region {
            return Err(ConfigError::new(
                "target.state_machine_arn",
                format!(
                    "the state machine is in region {} but the engine is configured for {region}",
                    arn.region
                ),
            ));
        }
        if let Some(key) = &self.input_key {
            if key.is_empty() {
                return Err(ConfigError::new("target.input_key", "must not be empty"));
            }
        }
        if let Some(step) = &self.human_step {
            if step.state.is_empty() || step.state.len() > 80 {
                return Err(ConfigError::new(
                    "target.human_step.state",
                    "must be the name of a task state (1 to 80 characters)",
                ));
            }
            if step.message.trim().is_empty() {
                return Err(ConfigError::new(
                    "target.human_step.message",
                    "must not be empty",
                ));
            }
            let is_object_schema = step
                .schema
                .as_object()
                .is_some_and(|o| o.get("type").and_then(Value::as_str) == Some("object"));
            if !is_object_schema {
                return Err(ConfigError::new(
                    "target.human_step.schema",
                    "must be a JSON Schema of type \"object\" (MCP elicitation asks for flat objects)",
                ));
            }
            if let Some(pointer) = &step.token_pointer {
                if !pointer.starts_with('/') {
                    return Err(ConfigError::new(
                        "target.human_step.token_pointer",
                        "must be a JSON pointer starting with '/', such as \"/MessageBody/taskToken\"",
                    ));
                }
            }
        }
        Ok(arn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn minimal_settings_are_valid() {
        let s = EngineSettings::from_value(json!({"region": "us-east-1"})).unwrap();
        assert_eq!(s.region, "us-east-1");
        assert!(s.endpoint_url.is_none());
    }

    #[test]
    fn bad_settings_name_their_key() {
        let cases = [
            (json!({"region": "us-east-1", "regoin": "x"}), "regoin"),
            (json!({}), "region"),
            (json!({"region": "US East"}), "region"),
            (
                json!({"region": "us-east-1", "endpoint_url": "localhost:5005"}),
                "endpoint_url",
            ),
            (
                json!({"region": "us-east-1", "assume_role_arn": "role/x"}),
                "assume_role_arn",
            ),
            (
                json!({"region": "us-east-1", "external_id": "abc"}),
                "external_id",
            ),
            (
                json!({"region": "us-east-1", "session_name": "abc"}),
                "session_name",
            ),
            (
                json!({"region": "us-east-1", "assume_role_arn": "arn:aws:iam::123456789012:role/r", "session_name": "a b"}),
                "session_name",
            ),
        ];
        for (value, key) in cases {
            let err = EngineSettings::from_value(value.clone()).unwrap_err();
            assert_eq!(err.key, key, "{value}: {err}");
        }
        EngineSettings::from_value(json!({
            "region": "eu-west-1",
            "endpoint_url": "http://127.0.0.1:5005",
            "profile": "ops",
            "assume_role_arn": "arn:aws:iam::123456789012:role/taskgate",
            "external_id": "xyz",
            "session_name": "taskgate-prod",
        }))
        .unwrap();
    }

    #[test]
    fn execution_arns_derive_from_the_state_machine_arn() {
        let cases = [
            (
                "arn:aws:states:us-east-1:123456789012:stateMachine:Analyze",
                "arn:aws:states:us-east-1:123456789012:execution:Analyze:tg-abc",
            ),
            (
                "arn:aws:states:us-east-1:123456789012:stateMachine:Analyze:3",
                "arn:aws:states:us-east-1:123456789012:execution:Analyze:tg-abc",
            ),
            (
                "arn:aws-cn:states:cn-north-1:123456789012:stateMachine:A_b-c:prod",
                "arn:aws-cn:states:cn-north-1:123456789012:execution:A_b-c:tg-abc",
            ),
        ];
        for (sm, exec) in cases {
            assert_eq!(
                StateMachineArn::parse(sm).unwrap().execution_arn("tg-abc"),
                exec
            );
        }
        for bad in [
            "arn:aws:states:us-east-1:123456789012:activity:A",
            "arn:aws:states:us-east-1:1234:stateMachine:A",
            "arn:aws:lambda:us-east-1:123456789012:stateMachine:A",
            "arn:aws:states:us-east-1:123456789012:stateMachine:",
            "arn:aws:states:us-east-1:123456789012:stateMachine:A:",
            "Analyze",
        ] {
            assert!(StateMachineArn::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn targets_are_checked() {
        let ok: ToolTarget = serde_json::from_value(json!({
            "state_machine_arn": "arn:aws:states:us-east-1:123456789012:stateMachine:A",
            "input_key": "args",
            "human_step": {"state": "Approve", "message": "Approve?", "schema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}},
        }))
        .unwrap();
        ok.validate("us-east-1").unwrap();
        assert_eq!(
            ok.validate("eu-west-1").unwrap_err().key,
            "target.state_machine_arn"
        );
        let mut bad = ok.clone();
        bad.human_step.as_mut().unwrap().schema = json!({"type": "string"});
        assert_eq!(
            bad.validate("us-east-1").unwrap_err().key,
            "target.human_step.schema"
        );
        let mut bad = ok.clone();
        bad.human_step.as_mut().unwrap().token_pointer = Some("MessageBody".into());
        assert_eq!(
            bad.validate("us-east-1").unwrap_err().key,
            "target.human_step.token_pointer"
        );
        let mut bad = ok;
        bad.input_key = Some(String::new());
        assert_eq!(
            bad.validate("us-east-1").unwrap_err().key,
            "target.input_key"
        );
    }
}
