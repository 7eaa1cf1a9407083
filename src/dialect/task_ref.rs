//! The one place a request's `params.taskId` is opened into the run it names.

use crate::core::handle::{short, Dialect, TaskClaims};
use crate::core::{Caller, Gateway, Tool};
use crate::rpc::{Params, RpcError};

/// Opens the task named by `params.taskId` for `caller` in `dialect` and notes it
/// (shortened) on the request's log span.
///
/// # Errors
///
/// -32602 when `taskId` is missing; [`crate::rpc::TASK_NOT_FOUND`] for a handle
/// that does not open, alike for every reason.
pub fn open_task<'p, 'g>(
    gw: &'g Gateway,
    caller: &Caller,
    dialect: Dialect,
    params: &'p Params,
) -> Result<(&'p str, TaskClaims, &'g Tool), RpcError> {
    let task_id = params
        .task_id()
        .ok_or_else(|| RpcError::InvalidParams("taskId is required".into()))?;
    let (claims, tool) = gw.open(caller, dialect, task_id)?;
    tracing::Span::current().record("task", short(task_id));
    Ok((task_id, claims, tool))
}
