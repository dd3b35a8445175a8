//! Workflows: chains, groups and chords (machinery's three shapes), built in
//! Rust and enqueued atomically, also inside the caller's transaction.
//!
//! A workflow is turned into a tree of JSON "specs" with every job and
//! workflow id chosen up front, and `conveyor_internal.spawn()` inserts the first jobs
//! and the `conveyor.workflows` rows. What comes later (the next chain step,
//! a chord's callback, success and error callbacks) is inserted by
//! `conveyor_internal.after_finish()` in the transaction that records the outcome it
//! depends on. See `sql/workflow/spawn.sql` and `after_finish.sql`.
//!
//! **Passing results.** A step added with [`Chain::then`] (or a callback added
//! with [`Group::then`], [`crate::NewJob::on_success`]) is *mutable*: its
//! arguments are the previous result, so its `Args` type must be the previous
//! task's `Output` (checked by the compiler). A step added with
//! [`Chain::then_job`] keeps the arguments it was built with and gets no result
//! (machinery's `Immutable`). Error callbacks always get a [`JobFailure`].
//!
//! **Limits.** A chain's steps are jobs or chords (a bare group cannot be a
//! step: a group joins into what follows, which is what a chord is). Chord and
//! group members keep their own arguments. Nesting is one level deep: a chord
//! inside a chain, not a chain inside a chord.

mod handle;

use std::marker::PhantomData;

use serde_json::{Value, json};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::job::JobId;
use crate::task::NewJob;
use crate::task::Task;

use crate::records::JobFailure;
pub use handle::{GroupHandle, WorkflowHandle};

/// Something [`Client::enqueue_workflow`] can enqueue: a [`Chain`], a
/// [`Group`] or a [`Chord`].
pub trait Workflow {
    /// What enqueueing it returns.
    type Handle;
    #[doc(hidden)]
    fn build(self, client: &Client) -> Result<(Value, Self::Handle)>;
}

fn collect(specs: Vec<Result<Value>>) -> Result<Vec<Value>> {
    specs.into_iter().collect()
}

/// Every job id in a workflow spec: members, later steps, callbacks. Errors
/// if one appears twice (a job given the same id in two places).
pub(crate) fn job_ids(spec: &Value) -> Result<Vec<JobId>> {
    fn walk(value: &Value, out: &mut Vec<JobId>) {
        match value {
            Value::Object(map) => {
                if map.get("kind").and_then(Value::as_str) == Some("job")
                    && let Some(id) = map.get("id").and_then(Value::as_str)
                    && let Ok(id) = id.parse()
                {
                    out.push(id);
                }
                map.values().for_each(|v| walk(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut ids = Vec::new();
    walk(spec, &mut ids);
    let mut seen = std::collections::HashSet::with_capacity(ids.len());
    match ids.iter().find(|id| !seen.insert(**id)) {
        Some(id) => Err(Error::InvalidJob(format!(
            "job id {id} appears twice in one workflow"
        ))),
        None => Ok(ids),
    }
}

fn new_id() -> uuid::Uuid {
    uuid::Uuid::now_v7()
}

fn job_id(job: &NewJob<Value>) -> JobId {
    job.id.unwrap_or_else(new_id)
}

/// A group of jobs run in parallel on any workers. `M` is the members' output.
///
/// ```
/// use conveyor::{Group, NewJob};
/// let group = Group::new((0..3).map(|i| NewJob::new("square", serde_json::json!(i))));
/// ```
pub struct Group<M = Value> {
    members: Vec<NewJob<Value>>,
    on_error: Vec<Result<Value>>,
    output: PhantomData<fn() -> M>,
}

impl<M> Group<M> {
    /// A group of these jobs, in member order.
    pub fn new(members: impl IntoIterator<Item = NewJob<M>>) -> Self {
        Group {
            members: members.into_iter().map(NewJob::untyped).collect(),
            on_error: Vec::new(),
            output: PhantomData,
        }
    }

    /// When a member fails for good, the group fails and `job` is enqueued
    /// (once) with a [`JobFailure`] for that member.
    pub fn on_error_job<P>(mut self, job: NewJob<P>) -> Self {
        self.on_error.push(job.callback_spec(true));
        self
    }

    /// Makes a chord: once every member succeeded, a job of task `C` runs with
    /// all their results, in member order.
    pub fn then<C: Task<Args = Vec<M>>>(self) -> Chord<C::Output> {
        Chord::with_callback(self, NewJob::<C::Output>::piped::<C>().untyped())
    }

    /// Makes a chord whose callback keeps its own arguments (immutable): it
    /// runs once every member succeeded, without their results.
    pub fn then_job<P>(self, callback: NewJob<P>) -> Chord<P> {
        Chord::with_callback(self, callback.untyped())
    }

    fn check(&self) -> Result<()> {
        if self.members.is_empty() {
            return Err(Error::InvalidJob(
                "a group needs at least one member".into(),
            ));
        }
        self.members.iter().try_for_each(NewJob::check_follow_up)
    }

    /// Member specs, with their ids.
    fn member_specs(&self, workflow_id: uuid::Uuid) -> (Vec<Value>, Vec<JobId>) {
        self.members
            .iter()
            .enumerate()
            .map(|(i, job)| {
                let id = job_id(job);
                (job.spec_with_id(id, Some(workflow_id), Some(i as i32)), id)
            })
            .unzip()
    }
}

impl<M> Workflow for Group<M> {
    type Handle = GroupHandle<M>;

    fn build(self, client: &Client) -> Result<(Value, GroupHandle<M>)> {
        self.check()?;
        let id = new_id();
        let (members, member_ids) = self.member_specs(id);
        let spec = json!({
            "kind": "workflow", "workflow": "group", "id": id,
            "total": members.len(), "on_error": collect(self.on_error)?, "start": members,
        });
        Ok((spec, GroupHandle::new(client.clone(), id, member_ids)))
    }
}

/// A group plus a callback that runs exactly once, after every member
/// succeeded, with all their results in member order. Made by [`Group::then`]
/// or [`Group::then_job`]; `O` is the callback's output.
pub struct Chord<O = Value> {
    group: Group<Value>,
    callback: NewJob<Value>,
    output: PhantomData<fn() -> O>,
}

impl<O> Chord<O> {
    fn with_callback<M>(group: Group<M>, callback: NewJob<Value>) -> Self {
        Chord {
            group: Group {
                members: group.members,
                on_error: group.on_error,
                output: PhantomData,
            },
            callback,
            output: PhantomData,
        }
    }

    /// If a member fails for good, the callback never runs, the chord fails,
    /// and `job` is enqueued (once) with a [`JobFailure`] for that member.
    pub fn on_error_job<P>(mut self, job: NewJob<P>) -> Self {
        self.group = self.group.on_error_job(job);
        self
    }

    /// Like [`Chord::on_error_job`], with a typed error callback.
    pub fn on_error<E: Task<Args = JobFailure>>(self) -> Self {
        self.on_error_job(NewJob::<E::Output>::piped::<E>())
    }

    /// The chord's spec; `continuation` runs after the callback (chain).
    fn spec(
        self,
        parent: Option<uuid::Uuid>,
        continuation: Option<Value>,
    ) -> Result<(Value, JobId)> {
        self.group.check()?;
        self.callback.check_follow_up()?;
        let id = new_id();
        let callback_id = job_id(&self.callback);
        let mut callback = self.callback;
        if let Some(next) = continuation {
            callback.on_success.insert(0, next);
        }
        let (members, _) = self.group.member_specs(id);
        let spec = json!({
            "kind": "workflow", "workflow": "chord", "id": id, "parent_id": parent,
            "total": members.len(), "result_job_id": callback_id,
            "on_complete": callback.spec_with_id(callback_id, Some(id), None),
            "on_error": collect(self.group.on_error)?, "start": members,
        });
        Ok((spec, callback_id))
    }
}

impl<O> Workflow for Chord<O> {
    type Handle = WorkflowHandle<O>;

    fn build(self, client: &Client) -> Result<(Value, WorkflowHandle<O>)> {
        let (spec, callback_id) = self.spec(None, None)?;
        let id = spec["id"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or_default();
        Ok((spec, WorkflowHandle::new(client.clone(), id, callback_id)))
    }
}

enum Step {
    Job(NewJob<Value>),
    Chord(Chord<Value>),
}

/// Jobs run one after another: each step is enqueued by the transaction that
/// records the previous step's success. The chain stops at the first step
/// that fails for good. `O` is the last step's output, the chain's result.
///
/// ```
/// use conveyor::{Chain, NewJob, Task, TaskContext, TaskError};
/// # struct Fetch; struct Parse; struct Store;
/// # impl Task for Fetch { const NAME: &'static str = "fetch"; type Args = String; type Output = String;
/// #   async fn run(&self, _: TaskContext, url: String) -> Result<String, TaskError> { Ok(url) } }
/// # impl Task for Parse { const NAME: &'static str = "parse"; type Args = String; type Output = Vec<u32>;
/// #   async fn run(&self, _: TaskContext, _: String) -> Result<Vec<u32>, TaskError> { Ok(vec![]) } }
/// # impl Task for Store { const NAME: &'static str = "store"; type Args = Vec<u32>; type Output = u64;
/// #   async fn run(&self, _: TaskContext, v: Vec<u32>) -> Result<u64, TaskError> { Ok(v.len() as u64) } }
/// // fetch's String output becomes parse's args, parse's Vec<u32> store's.
/// let chain = Chain::new(Fetch::job("https://example.com".into()))
///     .then::<Parse>()
///     .then::<Store>();
/// ```
pub struct Chain<O = Value> {
    steps: Vec<Step>,
    on_error: Vec<Result<Value>>,
    output: PhantomData<fn() -> O>,
}

impl<O> Chain<O> {
    /// A chain whose first step is `first`.
    pub fn new(first: NewJob<O>) -> Self {
        Chain {
            steps: vec![Step::Job(first.untyped())],
            on_error: Vec::new(),
            output: PhantomData,
        }
    }

    /// A chain whose first step is a chord ("fan out, join, continue").
    pub fn from_chord(first: Chord<O>) -> Self {
        Chain {
            steps: vec![Step::Chord(retype(first))],
            on_error: Vec::new(),
            output: PhantomData,
        }
    }

    /// Adds a step of task `T`, which receives this chain's current result as
    /// its arguments.
    pub fn then<T: Task<Args = O>>(self) -> Chain<T::Output> {
        self.push(Step::Job(NewJob::<T::Output>::piped::<T>().untyped()))
    }

    /// Like [`Chain::then`], with options (queue, priority…) set on `job`,
    /// which must come from [`Chain::step`].
    pub fn then_step<P>(self, job: PipedJob<O, P>) -> Chain<P> {
        self.push(Step::Job(job.0.untyped()))
    }

    /// Adds an immutable step: `job` keeps its own arguments and does not
    /// receive the previous result.
    pub fn then_job<P>(self, job: NewJob<P>) -> Chain<P> {
        self.push(Step::Job(job.untyped()))
    }

    /// Adds a chord step: its members start when the previous step succeeded;
    /// the chain goes on after its callback.
    pub fn then_chord<P>(self, chord: Chord<P>) -> Chain<P> {
        self.push(Step::Chord(retype(chord)))
    }

    /// If any step fails for good, enqueue `job` (once) with a [`JobFailure`].
    pub fn on_error_job<P>(mut self, job: NewJob<P>) -> Self {
        self.on_error.push(job.callback_spec(true));
        self
    }

    /// Like [`Chain::on_error_job`], with a typed error callback.
    pub fn on_error<E: Task<Args = JobFailure>>(self) -> Self {
        self.on_error_job(NewJob::<E::Output>::piped::<E>())
    }

    /// The job of a mutable step of task `T`, to set options on before
    /// [`Chain::then_step`].
    pub fn step<T: Task<Args = O>>() -> PipedJob<O, T::Output> {
        PipedJob(NewJob::<T::Output>::piped::<T>(), PhantomData)
    }

    fn push<P>(mut self, step: Step) -> Chain<P> {
        self.steps.push(step);
        Chain {
            steps: self.steps,
            on_error: self.on_error,
            output: PhantomData,
        }
    }
}

/// A step that will receive the previous result (`I`), returning `O`; set
/// options with [`PipedJob::configure`].
pub struct PipedJob<I, O>(NewJob<O>, PhantomData<fn(I)>);

impl<I, O> PipedJob<I, O> {
    /// Sets options (queue, priority, retries…) on the step's job.
    pub fn configure(self, f: impl FnOnce(NewJob<O>) -> NewJob<O>) -> Self {
        PipedJob(f(self.0), PhantomData)
    }
}

fn retype<A, B>(chord: Chord<A>) -> Chord<B> {
    Chord {
        group: chord.group,
        callback: chord.callback,
        output: PhantomData,
    }
}

impl<O> Workflow for Chain<O> {
    type Handle = WorkflowHandle<O>;

    fn build(self, client: &Client) -> Result<(Value, WorkflowHandle<O>)> {
        let id = new_id();
        let total = self.steps.len();
        let mut next: Option<Value> = None;
        let mut result_job_id: Option<JobId> = None;
        for (index, step) in self.steps.into_iter().enumerate().rev() {
            let spec = match step {
                Step::Job(mut job) => {
                    job.check_follow_up()?;
                    let job_id = job_id(&job);
                    result_job_id.get_or_insert(job_id);
                    if let Some(next) = next.take() {
                        job.on_success.insert(0, next);
                    }
                    job.spec_with_id(job_id, Some(id), Some(index as i32))
                }
                Step::Chord(chord) => {
                    let (spec, callback_id) = chord.spec(Some(id), next.take())?;
                    result_job_id.get_or_insert(callback_id);
                    spec
                }
            };
            next = Some(spec);
        }
        let result_job_id = result_job_id.unwrap_or_else(new_id);
        let spec = json!({
            "kind": "workflow", "workflow": "chain", "id": id, "total": total,
            "result_job_id": result_job_id, "on_error": collect(self.on_error)?, "start": [next],
        });
        Ok((spec, WorkflowHandle::new(client.clone(), id, result_job_id)))
    }
}
