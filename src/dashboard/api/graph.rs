//! A workflow's graph, built from its rows and specs: the steps of a chain
//! in order (each a job or a chord), or the members of a group or chord,
//! each node with its job's state, or none for a job not created (yet).
//!
//! The rows only hold what exists: a chain's next step is created when the
//! previous one succeeds. What is still to come is in the specs the rows
//! carry (a step's `on_success`, a chord's `on_complete`, a chord spec's
//! `start`), so the walk follows specs from the first step to the last and
//! looks each job and chord up among the rows. A continuation is told from
//! a success callback by its workflow: a chain step's spec names the chain
//! (`workflow_id`), a chord step's its parent (`parent_id`).

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::db::dashboard::{GraphJob, WorkflowNode};
use crate::job::JobId;

/// Members of a group or chord drawn; the others are counted.
pub(super) const MEMBERS_SHOWN: usize = 100;
/// Steps of a chain drawn at most.
const MAX_STEPS: usize = 100;

/// What the graph is built from: a top-level workflow, the workflows nested
/// in it, and the jobs of all of them (and chords' callbacks).
pub(super) struct Rows<'a> {
    pub root: &'a WorkflowNode,
    pub children: &'a [WorkflowNode],
    pub jobs: &'a [GraphJob],
}

impl Rows<'_> {
    fn job(&self, id: Option<JobId>) -> Option<&GraphJob> {
        id.and_then(|id| self.jobs.iter().find(|j| j.job.id == id))
    }

    /// The members of workflow `id` that exist, in member order.
    fn members(&self, id: uuid::Uuid) -> Vec<&GraphJob> {
        let mut seen = HashSet::new();
        let mut members: Vec<&GraphJob> = self
            .jobs
            .iter()
            .filter(|j| j.workflow_id == Some(id) && j.workflow_index.is_some())
            .filter(|j| seen.insert(j.job.id))
            .collect();
        members.sort_by_key(|j| (j.workflow_index, j.job.id));
        members
    }
}

fn uuid_of(value: &Value) -> Option<uuid::Uuid> {
    value.as_str().and_then(|s| s.parse().ok())
}

/// A node: the job's row if it exists, else what its spec says.
fn node(row: Option<&GraphJob>, spec: Option<&Value>) -> Value {
    match (row, spec) {
        (Some(j), _) => json!({
            "id": j.job.id, "task": j.job.task, "queue": j.job.queue, "state": j.job.state,
            "attempt": j.job.attempt, "max_retries": j.job.max_retries,
            "index": j.workflow_index, "exists": true,
        }),
        (None, Some(s)) => json!({
            "id": s.get("id"), "task": s.get("task"), "queue": s.get("queue"), "state": null,
            "index": s.get("workflow_index"), "exists": false,
        }),
        (None, None) => json!({ "id": null, "task": null, "state": null, "exists": false }),
    }
}

/// The chain step that follows, among a job's `on_success` specs.
fn continuation(on_success: Option<&Value>, chain: uuid::Uuid) -> Option<Value> {
    let chain = json!(chain.to_string());
    on_success?
        .as_array()?
        .iter()
        .find(|spec| match spec.get("kind").and_then(Value::as_str) {
            Some("job") => spec.get("workflow_id") == Some(&chain),
            Some("workflow") => spec.get("parent_id") == Some(&chain),
            _ => false,
        })
        .cloned()
}

/// A group or chord step: its members and (chord) callback. `row` is its
/// workflow row if it was created, `spec` its spec if known.
fn fan(
    rows: &Rows<'_>,
    id: uuid::Uuid,
    row: Option<&WorkflowNode>,
    spec: Option<&Value>,
) -> (Value, Option<Value>) {
    let (mut members, total): (Vec<Value>, usize) = match row {
        Some(w) => {
            let existing = rows.members(id);
            let shown = existing
                .iter()
                .take(MEMBERS_SHOWN)
                .map(|j| node(Some(j), None));
            (shown.collect(), usize::try_from(w.total).unwrap_or(0))
        }
        None => {
            let start = spec.and_then(|s| s.get("start")).and_then(Value::as_array);
            let start = start.map(Vec::as_slice).unwrap_or_default();
            let shown = start
                .iter()
                .take(MEMBERS_SHOWN)
                .map(|s| node(None, Some(s)));
            (shown.collect(), start.len())
        }
    };
    members.truncate(MEMBERS_SHOWN);
    // Not drawn: past the first hundred, or not in the table (pruned).
    let more = total.saturating_sub(members.len());
    let kind = row
        .map(|w| w.kind.as_str())
        .or_else(|| spec.and_then(|s| s.get("workflow")).and_then(Value::as_str))
        .unwrap_or("group");
    let callback_spec = row
        .and_then(|w| w.on_complete.as_ref())
        .or_else(|| spec.and_then(|s| s.get("on_complete")))
        .filter(|s| !s.is_null());
    let callback_id = row
        .and_then(|w| w.result_job_id)
        .or_else(|| callback_spec.and_then(|s| s.get("id")).and_then(uuid_of));
    let callback_row = if kind == "chord" {
        rows.job(callback_id)
    } else {
        None
    };
    let callback = (kind == "chord").then(|| node(callback_row, callback_spec));
    let next_from = callback_row
        .and_then(|j| j.on_success.as_ref())
        .or_else(|| callback_spec.and_then(|s| s.get("on_success")))
        .cloned();
    let step = json!({
        "type": kind,
        "workflow": row.map(|w| json!({
            "id": w.id, "state": w.state, "total": w.total,
            "succeeded": w.succeeded, "failed": w.failed,
        })),
        "id": id,
        "members": members,
        "more": more,
        "total": total,
        "callback": callback,
    });
    (step, next_from)
}

/// The steps of the graph, in order.
pub(super) fn steps(rows: &Rows<'_>) -> Vec<Value> {
    let root = rows.root;
    if root.kind != "chain" {
        return vec![fan(rows, root.id, Some(root), None).0];
    }
    // The first step: the job at index 0, or else the first chord created.
    let mut next: Option<Value> = match rows.members(root.id).first() {
        Some(j) if j.workflow_index == Some(0) => Some(json!({ "kind": "job", "id": j.job.id })),
        _ => rows
            .children
            .first()
            .map(|w| json!({ "kind": "workflow", "id": w.id })),
    };
    let mut steps = Vec::new();
    let mut seen = HashSet::new();
    while let Some(spec) = next.take() {
        let Some(id) = spec.get("id").and_then(uuid_of) else {
            break;
        };
        if steps.len() >= MAX_STEPS || !seen.insert(id) {
            break;
        }
        let spec_ref = spec.get("task").is_some().then_some(&spec);
        let after = if spec.get("kind").and_then(Value::as_str) == Some("workflow") {
            let row = rows.children.iter().find(|w| w.id == id);
            let spec_ref = spec.get("start").is_some().then_some(&spec);
            let (step, after) = fan(rows, id, row, spec_ref);
            steps.push(step);
            after
        } else {
            let row = rows.job(Some(id));
            steps.push(json!({ "type": "job", "id": id, "node": node(row, spec_ref) }));
            row.and_then(|j| j.on_success.clone())
                .or_else(|| spec.get("on_success").cloned())
        };
        next = continuation(after.as_ref(), root.id);
    }
    steps
}

/// The task names of a workflow's error callbacks.
pub(super) fn error_callbacks(root: &WorkflowNode) -> Vec<Value> {
    root.on_error
        .as_array()
        .map(|specs| {
            specs
                .iter()
                .filter_map(|s| s.get("task").cloned())
                .collect()
        })
        .unwrap_or_default()
}
