//! The lists and counts that read the stored rows, the live claims and
//! `conveyor.running_jobs` instead of the view (for speed at scale) show
//! exactly what `conveyor.jobs` shows: jobs held by a live claim, a claim
//! whose job was taken back since, settled running rows, waiting and
//! finished jobs of several days, in two queues.

use std::collections::BTreeSet;

use conveyor::{JobFilter, JobId, JobState};

use super::{get, insert, open, walk};
use crate::common::{TestDb, claimed_by_hand};

/// One of each kind of job the view tells apart, in queues `default` and
/// `media`.
async fn every_kind(db: &TestDb) {
    // Held by a live claim: pending on disk, started in the view.
    let (_, _) = claimed_by_hand(db, 4).await;
    // Listed by a live claim, but taken back since (a newer token on the
    // row, runnable again: back in the ready ring): pending in the view.
    let (stale, _) = claimed_by_hand(db, 2).await;
    sqlx::query(
        "UPDATE conveyor.job_rows
         SET lease_token = nextval('conveyor.lease_tokens'), run_at = run_at - interval '1 second'
         WHERE id = $1",
    )
    .bind(stale[0])
    .execute(&db.pool)
    .await
    .unwrap();
    for queue in ["default", "media"] {
        insert(db, 3, queue, "t", "").await;
        insert(db, 2, queue, "t", super::STARTED).await;
        insert(
            db,
            2,
            queue,
            "t",
            ", state, run_at|, 'scheduled', now() + interval '1 hour'",
        )
        .await;
        insert(
            db,
            2,
            queue,
            "t",
            ", state, attempt, run_at, last_error|, 'retry', 1, now() + interval '1 minute', 'x'",
        )
        .await;
        for state in ["success", "failure", "cancelled"] {
            // Finished over the last three days (three day tables each).
            insert(
                db,
                3,
                queue,
                "t",
                &format!(", state, attempt, finished_at|, '{state}', 1, now() - i * interval '1 day' + interval '1 hour'"),
            )
            .await;
        }
    }
    sqlx::query("ANALYZE conveyor.job_rows, conveyor.claims")
        .execute(&db.pool)
        .await
        .unwrap();
}

/// Ids in `conveyor.jobs` matching `filter` (SQL), newest first.
async fn in_view(db: &TestDb, filter: &str) -> Vec<JobId> {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT id FROM conveyor.jobs WHERE {filter} ORDER BY id DESC"
    )))
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn lists_and_counts_show_what_the_view_shows() {
    let db = TestDb::new().await;
    every_kind(&db).await;
    let held: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM conveyor.jobs j JOIN conveyor.job_rows r USING (id)
         WHERE j.state = 'started' AND r.state = 'pending'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(held, 5, "four held, plus the stale claim's other job");

    // conveyor.running_jobs: the view's started rows, every column alike.
    let differ: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (
             (SELECT * FROM conveyor.jobs WHERE state = 'started'
              EXCEPT ALL SELECT * FROM conveyor.running_jobs)
             UNION ALL
             (SELECT * FROM conveyor.running_jobs
              EXCEPT ALL SELECT * FROM conveyor.jobs WHERE state = 'started')) d",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(differ, 0);

    // The client's list (`conveyor jobs list`), whole and paged by three.
    let states = JobState::ALL.map(Some);
    for state in [None].into_iter().chain(states) {
        for queue in [None, Some("media")] {
            let mut filter = String::from("true");
            if let Some(s) = state {
                filter.push_str(&format!(" AND state = '{}'", s.as_str()));
            }
            if let Some(q) = queue {
                filter.push_str(&format!(" AND queue = '{q}'"));
            }
            let want = in_view(&db, &filter).await;
            let f = JobFilter {
                state,
                queue: queue.map(str::to_string),
                limit: 1_000,
                ..JobFilter::default()
            };
            let jobs = db.client.list_jobs(&f).await.unwrap();
            let got: Vec<JobId> = jobs.iter().map(|j| j.id).collect();
            assert_eq!(got, want, "list_jobs where {filter}");
            for job in &jobs {
                let view_state: String =
                    sqlx::query_scalar("SELECT state FROM conveyor.jobs WHERE id = $1")
                        .bind(job.id)
                        .fetch_one(&db.pool)
                        .await
                        .unwrap();
                assert_eq!(job.state.as_str(), view_state, "{}", job.id);
            }
            let mut paged = Vec::new();
            let mut before = None;
            loop {
                let page = db
                    .client
                    .list_job_ids(&JobFilter {
                        limit: 3,
                        before_id: before,
                        ..f.clone()
                    })
                    .await
                    .unwrap();
                let Some(last) = page.last().copied() else {
                    break;
                };
                paged.extend(page);
                before = Some(last);
            }
            assert_eq!(paged, want, "list_job_ids by threes where {filter}");
        }
    }

    // The dashboard's lists, each state's in its own order.
    let router = open(&db);
    for state in JobState::ALL {
        let want: BTreeSet<String> = in_view(&db, &format!("state = '{}'", state.as_str()))
            .await
            .iter()
            .map(|id| id.to_string())
            .collect();
        let listed = walk(&router, &format!("state={}", state.as_str()), 2).await;
        assert_eq!(listed.len(), want.len(), "{state:?}: no duplicates");
        let listed: BTreeSet<String> = listed.into_iter().collect();
        assert_eq!(listed, want, "dashboard list of {state:?}");
    }

    // The overview's counts of unfinished jobs.
    let reply = get(&router, "/api/overview").await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    for row in reply.body["queues"].as_array().unwrap() {
        let queue = row["queue"].as_str().unwrap();
        for state in ["scheduled", "pending", "started", "retry"] {
            let n = in_view(&db, &format!("queue = '{queue}' AND state = '{state}'"))
                .await
                .len() as i64;
            assert_eq!(row[state].as_i64(), Some(n), "{queue} {state}");
        }
    }
}
