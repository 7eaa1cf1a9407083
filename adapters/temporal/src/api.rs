//! The only module that talks to Temporal: one lazily made connection of the
//! official Rust client (`temporalio-client`: TLS, mTLS, API key), its raw
//! `WorkflowService` gRPC calls each under a deadline, and [`map_error`], the one
//! place Temporal's refusals become [`EngineError`]s.
//!
//! The client's own retries are off (the server's layers retry what is
//! retryable), and so are its HTTP/2 keep-alive pings and its DNS re-resolution
//! task: an idle taskgate sends Temporal nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use taskgate_engine::EngineError;
use temporalio_client::grpc::WorkflowService;
use temporalio_client::tonic;
use temporalio_client::{
    ClientTlsOptions, Connection, ConnectionOptions, RetryOptions, TlsOptions,
};
use temporalio_common::protos::temporal::api::workflowservice::v1 as ws;
use tokio::sync::OnceCell;
use tonic::Code;

use crate::config::Validated;

/// The identity taskgate gives in the requests that record one.
pub(crate) const IDENTITY: &str = "taskgate";

/// A Temporal client shared by an engine's pipelines.
#[derive(Clone)]
pub(crate) struct Api {
    settings: Arc<Validated>,
    connection: Arc<OnceCell<Connection>>,
    calls: Arc<AtomicU64>,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("url", &self.settings.url)
            .field("namespace", &self.settings.namespace)
            .finish_non_exhaustive()
    }
}

/// Maps a gRPC status to an [`EngineError`]: unavailable, aborted, cancelled and
/// unknown → unavailable (retryable); deadline → deadline exceeded (retryable);
/// resource exhausted → throttled (retryable); permission denied and
/// unauthenticated → permission denied naming `action`; not found → not found;
/// already exists → conflict; invalid argument, failed precondition and out of
/// range → invalid input; anything else → internal.
pub(crate) fn map_error(
    status: &tonic::Status,
    action: &'static str,
    after: Duration,
) -> EngineError {
    let message = status.message().chars().take(500).collect::<String>();
    match status.code() {
        Code::Unavailable | Code::Aborted | Code::Cancelled | Code::Unknown => {
            EngineError::Unavailable {
                message: format!("Temporal did not answer {action}: {message}"),
                source: Some(Box::new(status.clone())),
            }
        }
        Code::DeadlineExceeded => EngineError::DeadlineExceeded {
            operation: action,
            after,
        },
        Code::ResourceExhausted => EngineError::Throttled {
            retry_after: None,
            message: format!("Temporal is limiting {action}: {message}"),
        },
        Code::PermissionDenied => EngineError::PermissionDenied {
            action: action.to_owned(),
            message,
        },
        Code::Unauthenticated => EngineError::PermissionDenied {
            action: action.to_owned(),
            message: format!("Temporal refused the credentials: {message}"),
        },
        Code::NotFound => EngineError::NotFound,
        Code::AlreadyExists => EngineError::Conflict { message },
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => {
            EngineError::InvalidInput { message }
        }
        _ => EngineError::Internal {
            message: format!(
                "Temporal answered {action} with {:?}: {message}",
                status.code()
            ),
            source: Some(Box::new(status.clone())),
        },
    }
}

/// The gRPC method names, as Temporal's authorizer sees them (`action` in
/// errors).
pub(crate) mod action {
    pub(crate) const START: &str = "StartWorkflowExecution";
    pub(crate) const DESCRIBE: &str = "DescribeWorkflowExecution";
    pub(crate) const HISTORY: &str = "GetWorkflowExecutionHistory";
    pub(crate) const QUERY: &str = "QueryWorkflow";
    pub(crate) const UPDATE: &str = "UpdateWorkflowExecution";
    pub(crate) const SIGNAL: &str = "SignalWorkflowExecution";
    pub(crate) const CANCEL: &str = "RequestCancelWorkflowExecution";
    pub(crate) const TERMINATE: &str = "TerminateWorkflowExecution";
    pub(crate) const NAMESPACE: &str = "DescribeNamespace";
    pub(crate) const TASK_QUEUE: &str = "DescribeTaskQueue";
    pub(crate) const LIST: &str = "ListWorkflowExecutions";
}

macro_rules! rpc {
    ($(#[$doc:meta])* $name:ident, $req:ty, $resp:ty, $action:expr) => {
        $(#[$doc])*
        pub(crate) async fn $name(&self, request: $req, timeout: Option<Duration>) -> Result<$resp, EngineError> {
            let after = timeout.unwrap_or(self.settings.rpc_timeout);
            let mut service = self.connection().await?;
            let mut request = tonic::Request::new(request);
            request.set_timeout(after);
            self.calls.fetch_add(1, Ordering::Relaxed);
            // The server enforces grpc-timeout; the local bound covers a server
            // that stopped answering altogether.
            match tokio::time::timeout(after + Duration::from_secs(1), service.$name(request)).await {
                Ok(Ok(response)) => Ok(response.into_inner()),
                Ok(Err(status)) => Err(map_error(&status, $action, after)),
                Err(_) => Err(EngineError::DeadlineExceeded { operation: $action, after }),
            }
        }
    };
}

impl Api {
    /// A client for `settings`. Makes no connection: the first call does.
    pub(crate) fn new(settings: Validated) -> Self {
        Self {
            settings: Arc::new(settings),
            connection: Arc::new(OnceCell::new()),
            calls: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The namespace every call names.
    pub(crate) fn namespace(&self) -> &str {
        &self.settings.namespace
    }

    /// How long a read waits for a query's answer.
    pub(crate) fn query_timeout(&self) -> Duration {
        self.settings.query_timeout
    }

    /// The gRPC calls sent so far (tests count them).
    pub(crate) fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    async fn connection(&self) -> Result<Connection, EngineError> {
        let settings = &self.settings;
        let connection = self
            .connection
            .get_or_try_init(|| async {
                let url = temporalio_client::Url::parse(&settings.url).map_err(|e| {
                    EngineError::internal(format!("the address does not make a URL: {e}"))
                })?;
                let tls = settings.tls.as_ref().map(|t| {
                    let mut tls = TlsOptions::default();
                    tls.server_root_ca_cert = t.ca.clone();
                    tls.domain = t.server_name.clone();
                    tls.client_tls_options = t.client.as_ref().map(|(cert, key)| {
                        ClientTlsOptions::builder()
                            .client_cert(cert.clone())
                            .client_private_key(key.clone())
                            .build()
                    });
                    tls
                });
                let options = ConnectionOptions::new(url)
                    .identity(IDENTITY.to_owned())
                    .maybe_tls_options(tls)
                    .maybe_api_key(settings.api_key.clone())
                    .connect_timeout(settings.connect_timeout)
                    .retry_options(RetryOptions::no_retries())
                    .keep_alive(None)
                    .dns_load_balancing(None)
                    .build();
                // Connecting sends GetSystemInfo once; it too has a deadline.
                let bound = settings.connect_timeout + settings.rpc_timeout;
                match tokio::time::timeout(bound, Connection::connect(options)).await {
                    Ok(Ok(c)) => Ok(c),
                    Ok(Err(
                        temporalio_client::errors::ClientConnectError::SystemInfoCallError(status),
                    )) => Err(map_error(&status, "GetSystemInfo", bound)),
                    Ok(Err(e)) => Err(EngineError::unavailable(
                        format!("cannot connect to Temporal at {}", settings.url),
                        e,
                    )),
                    Err(_) => Err(EngineError::DeadlineExceeded {
                        operation: "connect",
                        after: bound,
                    }),
                }
            })
            .await?;
        Ok(connection.clone())
    }

    rpc!(
        /// StartWorkflowExecution.
        start_workflow_execution,
        ws::StartWorkflowExecutionRequest,
        ws::StartWorkflowExecutionResponse,
        action::START
    );
    rpc!(
        /// DescribeWorkflowExecution.
        describe_workflow_execution,
        ws::DescribeWorkflowExecutionRequest,
        ws::DescribeWorkflowExecutionResponse,
        action::DESCRIBE
    );
    rpc!(
        /// GetWorkflowExecutionHistory (a long poll with `wait_new_event`).
        get_workflow_execution_history,
        ws::GetWorkflowExecutionHistoryRequest,
        ws::GetWorkflowExecutionHistoryResponse,
        action::HISTORY
    );
    rpc!(
        /// QueryWorkflow.
        query_workflow,
        ws::QueryWorkflowRequest,
        ws::QueryWorkflowResponse,
        action::QUERY
    );
    rpc!(
        /// UpdateWorkflowExecution.
        update_workflow_execution,
        ws::UpdateWorkflowExecutionRequest,
        ws::UpdateWorkflowExecutionResponse,
        action::UPDATE
    );
    rpc!(
        /// SignalWorkflowExecution.
        signal_workflow_execution,
        ws::SignalWorkflowExecutionRequest,
        ws::SignalWorkflowExecutionResponse,
        action::SIGNAL
    );
    rpc!(
        /// RequestCancelWorkflowExecution.
        request_cancel_workflow_execution,
        ws::RequestCancelWorkflowExecutionRequest,
        ws::RequestCancelWorkflowExecutionResponse,
        action::CANCEL
    );
    rpc!(
        /// TerminateWorkflowExecution.
        terminate_workflow_execution,
        ws::TerminateWorkflowExecutionRequest,
        ws::TerminateWorkflowExecutionResponse,
        action::TERMINATE
    );
    rpc!(
        /// DescribeNamespace.
        describe_namespace,
        ws::DescribeNamespaceRequest,
        ws::DescribeNamespaceResponse,
        action::NAMESPACE
    );
    rpc!(
        /// ListWorkflowExecutions (visibility; `taskgate discover`).
        list_workflow_executions,
        ws::ListWorkflowExecutionsRequest,
        ws::ListWorkflowExecutionsResponse,
        action::LIST
    );
    rpc!(
        /// DescribeTaskQueue.
        describe_task_queue,
        ws::DescribeTaskQueueRequest,
        ws::DescribeTaskQueueResponse,
        action::TASK_QUEUE
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_engine_errors() {
        let after = Duration::from_secs(1);
        for (code, kind) in [
            (Code::Unavailable, "unavailable"),
            (Code::DeadlineExceeded, "deadline"),
            (Code::ResourceExhausted, "throttled"),
            (Code::PermissionDenied, "permission"),
            (Code::Unauthenticated, "permission"),
            (Code::NotFound, "not_found"),
            (Code::AlreadyExists, "conflict"),
            (Code::InvalidArgument, "invalid_input"),
            (Code::FailedPrecondition, "invalid_input"),
            (Code::Internal, "internal"),
        ] {
            let e = map_error(&tonic::Status::new(code, "m"), action::START, after);
            assert_eq!(e.kind(), kind, "{code:?}");
        }
        let e = map_error(
            &tonic::Status::permission_denied("no"),
            action::UPDATE,
            after,
        );
        assert!(
            matches!(&e, EngineError::PermissionDenied { action, .. } if action == "UpdateWorkflowExecution"),
            "{e}"
        );
        assert!(map_error(
            &tonic::Status::resource_exhausted("x"),
            action::QUERY,
            after
        )
        .is_retryable());
    }
}
