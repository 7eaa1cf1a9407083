//! The only module that talks to Step Functions: builds the SDK client from the
//! engine settings, makes each call once, converts answers into the wire-shaped
//! types of [`crate::translate`], and maps every upstream error to an
//! [`EngineError`].

use std::time::Duration;

use aws_config::sts::AssumeRoleProvider;
use aws_config::BehaviorVersion;
use aws_sdk_sfn::config::http::HttpResponse;
use aws_sdk_sfn::config::{Region, SharedHttpClient, SharedInterceptor};
use aws_sdk_sfn::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_sfn::primitives::DateTime;
use aws_sdk_sfn::types::StateMachineType;
use taskgate_engine::EngineError;

use crate::config::EngineSettings;
use crate::translate::{
    Execution, HistoryEvent, HistoryPage, LogEvent, StateDetails, TaskScheduled, TaskToken,
};

/// How long to wait for a TCP/TLS connection to Step Functions.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one attempt of a call may take.
pub(crate) const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a call may take with its retries (the server's deadline layer may be
/// shorter).
pub(crate) const OPERATION_TIMEOUT: Duration = Duration::from_secs(25);
/// Attempts per call (the first plus one retry): the client retries, not the SDK.
pub const MAX_ATTEMPTS: u32 = 2;
/// How many history events a read looks at (one page, newest first).
pub(crate) const HISTORY_PAGE: i32 = 20;
/// How many history events a log read asks for per page (the API's maximum).
pub(crate) const LOG_HISTORY_PAGE: i32 = 1000;

/// Extra wiring for the SDK client: a custom HTTP client or interceptors (used by
/// tests to inject faults, and available to embedders).
#[derive(Debug, Clone, Default)]
pub struct ClientOptions {
    /// Replaces the SDK's default HTTPS client.
    pub http_client: Option<SharedHttpClient>,
    /// Interceptors added to every Step Functions call.
    pub interceptors: Vec<SharedInterceptor>,
}

/// What StartExecution answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Started {
    /// The execution started (or was already running with the same name and input).
    Execution(String),
    /// An execution of that name exists (finished, or running with other input).
    AlreadyExists,
}

/// The part of DescribeStateMachine taskgate checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StateMachineInfo {
    /// True for Express state machines.
    pub express: bool,
    /// The Amazon States Language definition.
    pub definition: String,
    /// The description, when it has one.
    pub description: Option<String>,
}

/// A Step Functions client.
#[derive(Debug, Clone)]
pub(crate) struct SfnClient {
    inner: aws_sdk_sfn::Client,
}

impl SfnClient {
    /// Builds the client from validated settings. Makes no upstream call:
    /// credentials are resolved (and the role assumed) on first use.
    pub async fn new(settings: &EngineSettings, options: ClientOptions) -> Self {
        let region = Region::new(settings.region.clone());
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .region(region.clone())
            .retry_config(
                aws_config::retry::RetryConfig::standard().with_max_attempts(MAX_ATTEMPTS),
            )
            .timeout_config(
                aws_config::timeout::TimeoutConfig::builder()
                    .connect_timeout(CONNECT_TIMEOUT)
                    .operation_attempt_timeout(ATTEMPT_TIMEOUT)
                    .operation_timeout(OPERATION_TIMEOUT)
                    .build(),
            );
        if let Some(profile) = &settings.profile {
            loader = loader.profile_name(profile);
        }
        if let Some(http) = &options.http_client {
            loader = loader.http_client(http.clone());
        }
        // The endpoint applies to Step Functions only (not to STS for assume role).
        let base = loader.load().await;
        let mut config = aws_sdk_sfn::config::Builder::from(&base);
        if let Some(role) = &settings.assume_role_arn {
            let mut provider = AssumeRoleProvider::builder(role.clone())
                .region(region)
                .session_name(settings.session_name.as_deref().unwrap_or("taskgate"))
                .configure(&base);
            if let Some(id) = &settings.external_id {
                provider = provider.external_id(id.clone());
            }
            config = config.credentials_provider(provider.build().await);
        }
        if let Some(url) = &settings.endpoint_url {
            config = config.endpoint_url(url.clone());
        }
        for interceptor in options.interceptors {
            config = config.interceptor(interceptor);
        }
        Self {
            inner: aws_sdk_sfn::Client::from_conf(config.build()),
        }
    }

    /// StartExecution.
    ///
    /// # Errors
    ///
    /// See [`map_error`]; `ExecutionAlreadyExists` is [`Started::AlreadyExists`].
    pub async fn start_execution(
        &self,
        state_machine_arn: &str,
        name: &str,
        input: String,
        trace_header: Option<String>,
    ) -> Result<Started, EngineError> {
        let action = "states:StartExecution";
        match self
            .inner
            .start_execution()
            .state_machine_arn(state_machine_arn)
            .name(name)
            .input(input)
            .set_trace_header(trace_header)
            .send()
            .await
        {
            Ok(out) => Ok(Started::Execution(out.execution_arn().to_owned())),
            Err(e) if e.code() == Some("ExecutionAlreadyExists") => Ok(Started::AlreadyExists),
            Err(e) => Err(map_error(action, e)),
        }
    }

    /// DescribeExecution.
    ///
    /// # Errors
    ///
    /// [`EngineError::NotFound`] for `ExecutionDoesNotExist`; see [`map_error`].
    pub async fn describe_execution(&self, arn: &str) -> Result<Execution, EngineError> {
        let out = self
            .inner
            .describe_execution()
            .execution_arn(arn)
            .send()
            .await
            .map_err(|e| map_error("states:DescribeExecution", e))?;
        Ok(Execution {
            status: out.status().as_str().to_owned(),
            input: out.input().map(str::to_owned),
            output: out.output().map(str::to_owned),
            error: out.error().map(str::to_owned),
            cause: out.cause().map(str::to_owned),
            start_date: Some(secs(out.start_date())),
            stop_date: out.stop_date().map(secs),
        })
    }

    /// One page of GetExecutionHistory, newest events first.
    ///
    /// # Errors
    ///
    /// See [`map_error`].
    pub async fn history_page(&self, arn: &str) -> Result<HistoryPage, EngineError> {
        let out = self
            .inner
            .get_execution_history()
            .execution_arn(arn)
            .reverse_order(true)
            .max_results(HISTORY_PAGE)
            .include_execution_data(true)
            .send()
            .await
            .map_err(|e| map_error("states:GetExecutionHistory", e))?;
        let events = out
            .events()
            .iter()
            .map(|e| HistoryEvent {
                id: e.id(),
                previous_event_id: e.previous_event_id(),
                timestamp: Some(secs(e.timestamp())),
                kind: e.r#type().as_str().to_owned(),
                state_entered_event_details: e.state_entered_event_details().map(|d| {
                    StateDetails {
                        name: d.name().to_owned(),
                    }
                }),
                state_exited_event_details: e.state_exited_event_details().map(|d| StateDetails {
                    name: d.name().to_owned(),
                }),
                task_scheduled_event_details: e.task_scheduled_event_details().map(|d| {
                    TaskScheduled {
                        parameters: d.parameters().to_owned(),
                        resource: d.resource().to_owned(),
                    }
                }),
            })
            .collect();
        Ok(HistoryPage {
            events,
            next_token: out.next_token().map(str::to_owned),
        })
    }

    /// One page of GetExecutionHistory, oldest events first and without their
    /// input and output, for a log read: the events and the next page's token.
    ///
    /// # Errors
    ///
    /// See [`map_error`].
    pub async fn history_forward(
        &self,
        arn: &str,
        token: Option<String>,
    ) -> Result<(Vec<LogEvent>, Option<String>), EngineError> {
        let out = self
            .inner
            .get_execution_history()
            .execution_arn(arn)
            .reverse_order(false)
            .max_results(LOG_HISTORY_PAGE)
            .include_execution_data(false)
            .set_next_token(token)
            .send()
            .await
            .map_err(|e| map_error("states:GetExecutionHistory", e))?;
        let events = out.events().iter().map(log_event).collect();
        Ok((events, out.next_token().map(str::to_owned)))
    }

    /// StopExecution.
    ///
    /// # Errors
    ///
    /// See [`map_error`].
    pub async fn stop_execution(&self, arn: &str) -> Result<(), EngineError> {
        self.inner
            .stop_execution()
            .execution_arn(arn)
            .error("taskgate.Cancelled")
            .cause("cancelled by the MCP client")
            .send()
            .await
            .map_err(|e| map_error("states:StopExecution", e))?;
        Ok(())
    }

    /// SendTaskSuccess with `output` (JSON text).
    ///
    /// # Errors
    ///
    /// [`EngineError::Conflict`] when the token is spent; see [`map_error`].
    pub async fn send_task_success(
        &self,
        token: &TaskToken,
        output: String,
    ) -> Result<(), EngineError> {
        self.inner
            .send_task_success()
            .task_token(token.0.clone())
            .output(output)
            .send()
            .await
            .map_err(|e| map_error("states:SendTaskSuccess", e))?;
        Ok(())
    }

    /// SendTaskFailure with `error` and `cause`.
    ///
    /// # Errors
    ///
    /// [`EngineError::Conflict`] when the token is spent; see [`map_error`].
    pub async fn send_task_failure(
        &self,
        token: &TaskToken,
        error: &str,
        cause: &str,
    ) -> Result<(), EngineError> {
        self.inner
            .send_task_failure()
            .task_token(token.0.clone())
            .error(error)
            .cause(cause)
            .send()
            .await
            .map_err(|e| map_error("states:SendTaskFailure", e))?;
        Ok(())
    }

    /// DescribeStateMachine.
    ///
    /// # Errors
    ///
    /// [`EngineError::NotFound`] for `StateMachineDoesNotExist`; see [`map_error`].
    pub async fn describe_state_machine(&self, arn: &str) -> Result<StateMachineInfo, EngineError> {
        let out = self
            .inner
            .describe_state_machine()
            .state_machine_arn(arn)
            .send()
            .await
            .map_err(|e| map_error("states:DescribeStateMachine", e))?;
        Ok(StateMachineInfo {
            express: *out.r#type() == StateMachineType::Express,
            definition: out.definition().to_owned(),
            description: out.description().map(str::to_owned),
        })
    }

    /// One page of ListStateMachines (at most `max`): each state machine's ARN
    /// and name, and the token of the next page.
    ///
    /// # Errors
    ///
    /// See [`map_error`].
    pub async fn list_state_machines(
        &self,
        max: i32,
        next: Option<String>,
    ) -> Result<(Vec<(String, String)>, Option<String>), EngineError> {
        let out = self
            .inner
            .list_state_machines()
            .max_results(max)
            .set_next_token(next)
            .send()
            .await
            .map_err(|e| map_error("states:ListStateMachines", e))?;
        let items = out
            .state_machines()
            .iter()
            .map(|s| (s.state_machine_arn().to_owned(), s.name().to_owned()))
            .collect();
        Ok((items, out.next_token().map(str::to_owned)))
    }

    /// The ARNs of the state machine's most recent executions (one page of
    /// ListExecutions, at most `max`, newest first).
    ///
    /// # Errors
    ///
    /// See [`map_error`].
    pub async fn recent_executions(
        &self,
        state_machine_arn: &str,
        max: i32,
    ) -> Result<Vec<String>, EngineError> {
        let out = self
            .inner
            .list_executions()
            .state_machine_arn(state_machine_arn)
            .max_results(max)
            .send()
            .await
            .map_err(|e| map_error("states:ListExecutions", e))?;
        Ok(out
            .executions()
            .iter()
            .map(|e| e.execution_arn().to_owned())
            .collect())
    }

    /// ListStateMachines with at most one result: tests reachability and
    /// permissions.
    ///
    /// # Errors
    ///
    /// See [`map_error`].
    pub async fn list_one_state_machine(&self) -> Result<usize, EngineError> {
        let out = self
            .inner
            .list_state_machines()
            .max_results(1)
            .send()
            .await
            .map_err(|e| map_error("states:ListStateMachines", e))?;
        Ok(out.state_machines().len())
    }
}

/// The parts of an event a log line shows (see [`LogEvent`]).
fn log_event(e: &aws_sdk_sfn::types::HistoryEvent) -> LogEvent {
    let state = e
        .state_entered_event_details()
        .map(|d| d.name().to_owned())
        .or_else(|| e.state_exited_event_details().map(|d| d.name().to_owned()));
    let resource = e
        .task_scheduled_event_details()
        .map(|d| format!("{}:{}", d.resource_type(), d.resource()));
    // Failures, aborts and time-outs of executions and tasks: error and cause.
    let failure = e
        .execution_failed_event_details()
        .map(|d| (d.error(), d.cause()))
        .or_else(|| {
            e.execution_aborted_event_details()
                .map(|d| (d.error(), d.cause()))
        })
        .or_else(|| {
            e.execution_timed_out_event_details()
                .map(|d| (d.error(), d.cause()))
        })
        .or_else(|| {
            e.task_failed_event_details()
                .map(|d| (d.error(), d.cause()))
        })
        .or_else(|| {
            e.task_timed_out_event_details()
                .map(|d| (d.error(), d.cause()))
        })
        .or_else(|| {
            e.task_start_failed_event_details()
                .map(|d| (d.error(), d.cause()))
        })
        .or_else(|| {
            e.task_submit_failed_event_details()
                .map(|d| (d.error(), d.cause()))
        })
        .or_else(|| {
            e.activity_failed_event_details()
                .map(|d| (d.error(), d.cause()))
        })
        .or_else(|| {
            e.lambda_function_failed_event_details()
                .map(|d| (d.error(), d.cause()))
        })
        .or_else(|| {
            e.map_run_failed_event_details()
                .map(|d| (d.error(), d.cause()))
        });
    let (error, cause) = failure.map_or((None, None), |(error, cause)| {
        (error.map(str::to_owned), cause.map(str::to_owned))
    });
    LogEvent {
        id: e.id(),
        timestamp: secs(e.timestamp()),
        kind: e.r#type().as_str().to_owned(),
        state,
        resource,
        error,
        cause,
    }
}

fn secs(t: &DateTime) -> f64 {
    t.as_secs_f64()
}

/// Error codes AWS SDKs treat as throttling (as the SDK's retry classifier does),
/// plus Step Functions' own "too many open executions".
const THROTTLING_CODES: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottledException",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "TransactionInProgressException",
    "RequestLimitExceeded",
    "BandwidthLimitExceeded",
    "LimitExceededException",
    "RequestThrottled",
    "SlowDown",
    "PriorRequestNotComplete",
    "EC2ThrottledException",
    "ExecutionLimitExceeded",
];

const ACCESS_CODES: &[&str] = &[
    "AccessDenied",
    "AccessDeniedException",
    "UnrecognizedClientException",
    "InvalidClientTokenId",
    "ExpiredToken",
    "ExpiredTokenException",
    "InvalidSignatureException",
    "MissingAuthenticationToken",
    "NotAuthorized",
];

/// How long to wait after a throttle when Step Functions does not say.
pub(crate) const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);

/// Maps an SDK error of the call authorized by IAM `action` to an [`EngineError`].
///
/// Throttling (by code, or HTTP 429) is [`EngineError::Throttled`]; access denied
/// is [`EngineError::PermissionDenied`] naming `action`; a missing execution or
/// state machine is [`EngineError::NotFound`]; a spent task token is
/// [`EngineError::Conflict`]; a refused input is [`EngineError::InvalidInput`];
/// server errors, timeouts and connection failures are
/// [`EngineError::Unavailable`].
pub(crate) fn map_error<E>(action: &'static str, err: SdkError<E, HttpResponse>) -> EngineError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let status = err.raw_response().map(|r| r.status().as_u16());
    let code = err.code().map(str::to_owned);
    let service_message = err.message().map(str::to_owned);
    let message = || describe(action, code.as_deref(), service_message.as_deref(), &err);
    let code_is = |list: &[&str]| code.as_deref().is_some_and(|c| list.contains(&c));
    if code_is(THROTTLING_CODES) || status == Some(429) {
        return EngineError::Throttled {
            retry_after: Some(throttle_wait(&err, code.as_deref())),
            message: message(),
        };
    }
    if code.as_deref() == Some("KmsAccessDeniedException") {
        return EngineError::PermissionDenied {
            action: "kms:Decrypt".into(),
            message: message(),
        };
    }
    if code_is(ACCESS_CODES) || status == Some(403) {
        return EngineError::PermissionDenied {
            action: action.into(),
            message: message(),
        };
    }
    if let Some(e) = by_code(action, code.as_deref(), &message) {
        return e;
    }
    match &err {
        SdkError::ConstructionFailure(_) => EngineError::Internal {
            message: format!("{action}: {}", DisplayErrorContext(&err)),
            source: Some(Box::new(err)),
        },
        // Clients get what failed; the SDK's chain (addresses, connector
        // internals) stays in the source, for the server log.
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            EngineError::Unavailable {
                message: format!("{action}: {}", transport_failure(&err)),
                source: Some(Box::new(err)),
            }
        }
        _ if status.is_some_and(|s| s >= 500) => EngineError::Unavailable {
            message: message(),
            source: Some(Box::new(err)),
        },
        _ => EngineError::Internal {
            message: message(),
            source: Some(Box::new(err)),
        },
    }
}

/// `action: code: the service's text`, or the SDK's account of the failure when
/// the service said nothing.
fn describe<E>(
    action: &str,
    code: Option<&str>,
    text: Option<&str>,
    err: &SdkError<E, HttpResponse>,
) -> String
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let mut m = String::new();
    if let Some(code) = code {
        m.push_str(code);
    }
    if let Some(text) = text {
        if !m.is_empty() {
            m.push_str(": ");
        }
        m.push_str(text);
    }
    if m.is_empty() {
        m = DisplayErrorContext(err).to_string();
    }
    format!("{action}: {m}")
}

/// How long a throttled call waits: as `Retry-After` says, else a default (ten
/// times longer for a full account's execution limit).
fn throttle_wait<E>(err: &SdkError<E, HttpResponse>, code: Option<&str>) -> Duration {
    err.raw_response()
        .and_then(|r| r.headers().get("retry-after"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(
            if code == Some("ExecutionLimitExceeded") {
                DEFAULT_RETRY_AFTER * 10
            } else {
                DEFAULT_RETRY_AFTER
            },
            Duration::from_secs,
        )
}

/// The errors the service's error code alone decides: a missing execution or
/// state machine, a spent task token, a refused input.
fn by_code(action: &str, code: Option<&str>, message: &dyn Fn() -> String) -> Option<EngineError> {
    match code {
        Some("ExecutionDoesNotExist" | "StateMachineDoesNotExist") => Some(EngineError::NotFound),
        // Never echo the service's message here: it may quote the token.
        Some("InvalidToken" | "TaskTimedOut" | "TaskDoesNotExist") => Some(EngineError::Conflict {
            message: format!(
                "{action}: the task no longer waits for an answer ({})",
                code.unwrap_or_default()
            ),
        }),
        Some(
            "InvalidArn"
            | "InvalidName"
            | "InvalidExecutionInput"
            | "InvalidOutput"
            | "ValidationException"
            | "StateMachineDeleting"
            | "StateMachineTypeNotSupported",
        ) => Some(EngineError::InvalidInput { message: message() }),
        _ => None,
    }
}

/// What a request that got no answer ran into, in a few words.
fn transport_failure<E>(err: &SdkError<E, HttpResponse>) -> &'static str {
    match err {
        SdkError::TimeoutError(_) => "no answer within the client's timeout",
        SdkError::DispatchFailure(f) if f.is_timeout() => "no answer within the client's timeout",
        SdkError::DispatchFailure(f) if f.is_io() => "Step Functions could not be reached",
        SdkError::DispatchFailure(_) => "the request could not be sent",
        _ => "the answer could not be read",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_sfn::error::ErrorMetadata;
    use aws_sdk_sfn::operation::describe_execution::DescribeExecutionError;
    use aws_smithy_types::body::SdkBody;

    fn service_error(
        status: u16,
        code: &str,
        headers: &[(&'static str, &'static str)],
    ) -> SdkError<DescribeExecutionError, HttpResponse> {
        let mut raw = HttpResponse::new(status.try_into().unwrap(), SdkBody::from("{}"));
        for (k, v) in headers {
            raw.headers_mut().insert(*k, *v);
        }
        let meta = ErrorMetadata::builder()
            .code(code)
            .message("the service said no")
            .build();
        SdkError::service_error(DescribeExecutionError::generic(meta), raw)
    }

    #[test]
    fn upstream_errors_map_to_engine_errors() {
        let action = "states:DescribeExecution";
        let throttled = map_error(action, service_error(400, "ThrottlingException", &[]));
        assert!(
            matches!(&throttled, EngineError::Throttled { retry_after: Some(d), .. } if *d == DEFAULT_RETRY_AFTER),
            "{throttled:?}"
        );
        let told = map_error(
            action,
            service_error(429, "Whatever", &[("retry-after", "7")]),
        );
        assert_eq!(told.retry_after(), Some(Duration::from_secs(7)));
        assert!(matches!(
            map_error(action, service_error(400, "ExecutionLimitExceeded", &[])),
            EngineError::Throttled { .. }
        ));
        for code in ["AccessDeniedException", "UnrecognizedClientException"] {
            let e = map_error(action, service_error(400, code, &[]));
            assert!(
                matches!(&e, EngineError::PermissionDenied { action: a, .. } if a == action),
                "{e:?}"
            );
        }
        let e = map_error(action, service_error(403, "Forbidden", &[]));
        assert!(matches!(e, EngineError::PermissionDenied { .. }), "{e:?}");
        assert!(matches!(
            map_error(action, service_error(400, "KmsAccessDeniedException", &[])),
            EngineError::PermissionDenied { action, .. } if action == "kms:Decrypt"
        ));
        assert!(matches!(
            map_error(action, service_error(400, "ExecutionDoesNotExist", &[])),
            EngineError::NotFound
        ));
        for code in ["InvalidToken", "TaskTimedOut", "TaskDoesNotExist"] {
            let e = map_error(action, service_error(400, code, &[]));
            let EngineError::Conflict { message } = &e else {
                panic!("{e:?}")
            };
            assert!(message.contains(code) && !message.contains("the service said no"));
        }
        assert!(matches!(
            map_error(action, service_error(400, "InvalidExecutionInput", &[])),
            EngineError::InvalidInput { .. }
        ));
        let e = map_error(action, service_error(503, "ServiceUnavailable", &[]));
        assert!(
            matches!(e, EngineError::Unavailable { .. }) && e.is_retryable(),
            "{e:?}"
        );
        let e = map_error(action, service_error(400, "SomethingNew", &[]));
        assert!(matches!(e, EngineError::Internal { .. }), "{e:?}");
    }
}
