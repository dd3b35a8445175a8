//! Type-erased handlers: what the worker calls for a task name.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::task::{Task, TaskContext, TaskError};

pub(crate) type HandlerFuture = Pin<Box<dyn Future<Output = Result<Value, TaskError>> + Send>>;

/// A handler for one task name, taking and returning JSON.
pub(crate) trait Handler: Send + Sync + 'static {
    fn call(&self, ctx: TaskContext, args: Value) -> HandlerFuture;
    /// The task type's default attempt timeout.
    fn timeout(&self) -> Option<Duration>;
}

/// A [`Task`] implementation seen as a JSON handler.
pub(crate) struct TypedHandler<T>(pub(crate) Arc<T>);

impl<T: Task> Handler for TypedHandler<T> {
    fn call(&self, ctx: TaskContext, args: Value) -> HandlerFuture {
        let task = self.0.clone();
        Box::pin(async move {
            let args: T::Args = serde_json::from_value(args).map_err(|e| {
                TaskError::fail(format!("task `{}`: cannot decode args: {e}", T::NAME))
            })?;
            let output = task.run(ctx, args).await?;
            serde_json::to_value(output).map_err(|e| {
                TaskError::fail(format!("task `{}`: cannot encode result: {e}", T::NAME))
            })
        })
    }

    fn timeout(&self) -> Option<Duration> {
        T::TIMEOUT
    }
}

/// A closure taking JSON arguments.
pub(crate) struct FnHandler<F>(pub(crate) F);

impl<F, Fut> Handler for FnHandler<F>
where
    F: Fn(TaskContext, Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, TaskError>> + Send + 'static,
{
    fn call(&self, ctx: TaskContext, args: Value) -> HandlerFuture {
        Box::pin((self.0)(ctx, args))
    }

    fn timeout(&self) -> Option<Duration> {
        None
    }
}
