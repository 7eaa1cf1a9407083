//! Who may use which tool: the caller a request comes from, and the per-tool
//! access rules of the configuration.
//!
//! A tool's rule is a list of alternatives; an alternative admits a caller when
//! every condition it gives holds (one of its `callers`, all of its `scopes`, one
//! of its `groups`). A caller admitted by no alternative does not see the tool in
//! `tools/list`, and its calls and cancels are refused before any engine call.
//! Answers to a run's input requests follow the tool's `answer_access` (by
//! default the same rule). When an alternative fails only for want of scopes, the refusal names
//! them, so an OAuth client can ask for a token that has them (step-up).

use std::collections::BTreeSet;
use std::fmt;

use super::config::{AccessRule, FileConfig};

/// Who a request comes from: the identity its task handles are bound to, and
/// what access rules look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    id: String,
    scopes: BTreeSet<String>,
    groups: BTreeSet<String>,
}

impl Caller {
    /// A caller with the scopes and groups it holds.
    pub fn new(
        id: impl Into<String>,
        scopes: impl IntoIterator<Item = String>,
        groups: impl IntoIterator<Item = String>,
    ) -> Self {
        Self {
            id: id.into(),
            scopes: scopes.into_iter().collect(),
            groups: groups.into_iter().collect(),
        }
    }

    /// A caller that holds no scopes and is in no groups (`anonymous`).
    pub fn plain(id: impl Into<String>) -> Self {
        Self::new(id, [], [])
    }

    /// The identity handles are bound to.
    #[must_use]
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The scopes it holds.
    #[must_use]
    pub fn scopes(&self) -> &BTreeSet<String> {
        &self.scopes
    }

    /// The groups it is in.
    #[must_use]
    pub fn groups(&self) -> &BTreeSet<String> {
        &self.groups
    }
}

impl std::ops::Deref for Caller {
    type Target = str;

    fn deref(&self) -> &str {
        &self.id
    }
}

impl fmt::Display for Caller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.id)
    }
}

/// What a rule says about one caller and one tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The caller may use the tool.
    Allowed,
    /// The caller would be admitted with these scopes (all of them), which its
    /// credentials lack.
    NeedsScopes(Vec<String>),
    /// No alternative admits the caller.
    Denied,
}

/// The access rules of every tool, checked on each request.
#[derive(Debug, Clone)]
pub struct AccessPolicy {
    default: Vec<AccessRule>,
    /// Tool name → its own rule.
    tools: Vec<(String, Vec<AccessRule>)>,
    /// Tool name → its own rule for answers (`answer_access`).
    answers: Vec<(String, Vec<AccessRule>)>,
}

/// The default for tools that say nothing: every caller who got through the front door.
fn everyone() -> Vec<AccessRule> {
    vec![AccessRule {
        callers: vec!["*".to_owned()],
        ..AccessRule::default()
    }]
}

impl AccessPolicy {
    /// The policy of a configuration.
    #[must_use]
    pub fn from_config(cfg: &FileConfig) -> Self {
        Self {
            default: cfg.auth.default_access.clone().unwrap_or_else(everyone),
            tools: cfg
                .tools
                .iter()
                .filter_map(|t| t.access.clone().map(|a| (t.name.clone(), a)))
                .collect(),
            answers: cfg
                .tools
                .iter()
                .filter_map(|t| t.answer_access.clone().map(|a| (t.name.clone(), a)))
                .collect(),
        }
    }

    /// The rule that applies to `tool`.
    #[must_use]
    pub fn rule(&self, tool: &str) -> &[AccessRule] {
        self.tools
            .iter()
            .find(|(name, _)| name == tool)
            .map_or(&self.default, |(_, rule)| rule)
    }

    /// The rule for answering the input requests of `tool`'s runs: its
    /// `answer_access`, else the rule that applies to the tool.
    #[must_use]
    pub fn answer_rule(&self, tool: &str) -> &[AccessRule] {
        self.answers
            .iter()
            .find(|(name, _)| name == tool)
            .map_or_else(|| self.rule(tool), |(_, rule)| rule)
    }

    /// What the answer rule of `tool` says about `caller`.
    #[must_use]
    pub fn decide_answer(&self, caller: &Caller, tool: &str) -> Decision {
        decide(self.answer_rule(tool), caller)
    }

    /// True when every caller sees the same tools (no rule names anyone), so a
    /// tool list may be cached publicly.
    #[must_use]
    pub fn is_uniform(&self) -> bool {
        let open = |r: &[AccessRule]| *r == *everyone();
        open(&self.default) && self.tools.iter().all(|(_, r)| open(r))
    }

    /// What the rule of `tool` says about `caller`.
    #[must_use]
    pub fn decide(&self, caller: &Caller, tool: &str) -> Decision {
        decide(self.rule(tool), caller)
    }

    /// Every scope some rule asks for, sorted.
    #[must_use]
    pub fn scopes(&self) -> Vec<String> {
        let all: BTreeSet<&String> = self
            .tools
            .iter()
            .chain(&self.answers)
            .flat_map(|(_, r)| r.iter())
            .chain(self.default.iter())
            .flat_map(|a| a.scopes.iter())
            .collect();
        all.into_iter().cloned().collect()
    }
}

/// What `rule` says about `caller`: allowed when one alternative admits it;
/// otherwise the scopes of the first alternative that fails only for want of
/// scopes; otherwise denied.
#[must_use]
pub fn decide(rule: &[AccessRule], caller: &Caller) -> Decision {
    let mut step_up = None;
    for alt in rule {
        let who =
            alt.callers.is_empty() || alt.callers.iter().any(|c| c == "*" || c == caller.id());
        let group = alt.groups.is_empty() || alt.groups.iter().any(|g| caller.groups.contains(g));
        if !(who && group) {
            continue;
        }
        if alt.scopes.iter().all(|s| caller.scopes.contains(s)) {
            return Decision::Allowed;
        }
        if step_up.is_none() {
            step_up = Some(alt.scopes.clone());
        }
    }
    step_up.map_or(Decision::Denied, Decision::NeedsScopes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alt(callers: &[&str], scopes: &[&str], groups: &[&str]) -> AccessRule {
        let v = |x: &[&str]| x.iter().map(|s| (*s).to_owned()).collect();
        AccessRule {
            callers: v(callers),
            scopes: v(scopes),
            groups: v(groups),
        }
    }

    fn who(id: &str, scopes: &[&str], groups: &[&str]) -> Caller {
        Caller::new(
            id,
            scopes.iter().map(|s| (*s).to_owned()),
            groups.iter().map(|s| (*s).to_owned()),
        )
    }

    #[test]
    fn rules_table() {
        use Decision::{Allowed, Denied, NeedsScopes};
        let idp = "https://idp.example/#svc-1";
        let table: Vec<(&str, Vec<AccessRule>, Caller, Decision)> = vec![
            ("everyone", everyone(), who("anonymous", &[], &[]), Allowed),
            ("nobody", vec![], who("alice", &["a"], &["g"]), Denied),
            (
                "named caller",
                vec![alt(&["alice"], &[], &[])],
                who("alice", &[], &[]),
                Allowed,
            ),
            (
                "other caller",
                vec![alt(&["alice"], &[], &[])],
                who("bob", &[], &[]),
                Denied,
            ),
            (
                "oauth caller by iss#sub",
                vec![alt(&[idp], &[], &[])],
                who(idp, &[], &[]),
                Allowed,
            ),
            (
                "scope held",
                vec![alt(&[], &["deploy"], &[])],
                who(idp, &["deploy", "x"], &[]),
                Allowed,
            ),
            (
                "scope missing: step-up",
                vec![alt(&[], &["deploy", "read"], &[])],
                who(idp, &["read"], &[]),
                NeedsScopes(vec!["deploy".into(), "read".into()]),
            ),
            (
                "group member",
                vec![alt(&[], &[], &["ops", "sre"])],
                who("bob", &[], &["sre"]),
                Allowed,
            ),
            (
                "not a member",
                vec![alt(&[], &[], &["ops"])],
                who("bob", &[], &["dev"]),
                Denied,
            ),
            (
                "all conditions of one alternative",
                vec![alt(&["alice"], &["deploy"], &["ops"])],
                who("alice", &["deploy"], &["dev"]),
                Denied,
            ),
            (
                "group holds but scope missing",
                vec![alt(&[], &["deploy"], &["ops"])],
                who("bob", &[], &["ops"]),
                NeedsScopes(vec!["deploy".into()]),
            ),
            (
                "scope would not help a non-member",
                vec![alt(&[], &["deploy"], &["ops"])],
                who("bob", &[], &["dev"]),
                Denied,
            ),
            (
                "second alternative admits",
                vec![alt(&[], &["deploy"], &[]), alt(&["ci-bot"], &[], &[])],
                who("ci-bot", &[], &[]),
                Allowed,
            ),
            (
                "first scope-only failure is named",
                vec![
                    alt(&["x"], &["a"], &[]),
                    alt(&[], &["b"], &[]),
                    alt(&[], &["c"], &[]),
                ],
                who("y", &[], &[]),
                NeedsScopes(vec!["b".into()]),
            ),
            (
                "wildcard with scope",
                vec![alt(&["*"], &["s"], &[])],
                who("z", &["s"], &[]),
                Allowed,
            ),
        ];
        for (name, rule, caller, want) in table {
            assert_eq!(decide(&rule, &caller), want, "{name}");
        }
    }

    /// Answers follow `answer_access` where a tool sets it, else its `access`
    /// (else the default): a caller of the tool is not thereby an approver, and
    /// an approver need not be a caller.
    #[test]
    fn answers_follow_answer_access_else_access() {
        let policy = AccessPolicy {
            default: everyone(),
            tools: vec![
                ("deploy".into(), vec![alt(&["alice", "carol"], &[], &[])]),
                ("build".into(), vec![alt(&["alice"], &[], &[])]),
            ],
            answers: vec![("deploy".into(), vec![alt(&[], &[], &["release"])])],
        };
        let alice = who("alice", &[], &[]);
        let carol = who("carol", &[], &[]);
        let bob = who("bob", &[], &["release"]);
        assert_eq!(policy.decide(&carol, "deploy"), Decision::Allowed);
        assert_eq!(policy.decide_answer(&carol, "deploy"), Decision::Denied);
        assert_eq!(policy.decide(&bob, "deploy"), Decision::Denied);
        assert_eq!(policy.decide_answer(&bob, "deploy"), Decision::Allowed);
        // No answer_access: the tool's own rule, then the default.
        assert_eq!(policy.decide_answer(&alice, "build"), Decision::Allowed);
        assert_eq!(policy.decide_answer(&bob, "build"), Decision::Denied);
        assert_eq!(policy.decide_answer(&bob, "other"), Decision::Allowed);
        assert!(!policy.is_uniform());
    }

    #[test]
    fn caller_reads_as_its_id() {
        let c = who("alice", &["s"], &[]);
        let s: &str = &c;
        assert_eq!(s, "alice");
        assert_eq!(c.to_string(), "alice");
    }
}
