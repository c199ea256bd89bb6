//! What cancelled calls' sandboxes failed to keep, held for a later answer.
//!
//! A call the client cancels gets no answer: rmcp drops it, as the protocol has it. Where
//! the call's sandbox failed a promise meanwhile (a protected path it could not put back,
//! an end it cannot confirm), that must still reach the client, so it goes with the next
//! answer. rmcp decides to drop an answer in its event loop, after the handler returned
//! (and cancels the request's token whether it sends or drops it), so a cancellation that
//! reaches it in that moment drops an answer the handler took for sent: every broken
//! promise is also said on stderr as it happens (see the README's known limits).

use std::sync::Mutex;

use serde_json::{json, Value};

#[derive(Default)]
pub struct Untold {
    queued: Mutex<Vec<Report>>,
}

/// One call's broken promise: its request id and its whole result.
#[derive(Clone)]
pub struct Report {
    pub request_id: Value,
    pub result: Value,
}

impl Report {
    pub fn new(request_id: Value, result: Value) -> Report {
        Report { request_id, result }
    }

    /// As the model reads it at the top of a later answer.
    pub fn line(&self) -> String {
        format!(
            "[an earlier call (request {}) was cancelled, so it got no answer, but its \
             sandbox failed a promise: {}. Tell the user. What it reported: {}]\n",
            self.request_id,
            self.result["error"].as_str().unwrap_or_default(),
            self.result["protected_paths_restored"]
        )
    }

    /// As programs read it, in a later answer's `earlier_calls`.
    pub fn value(&self) -> Value {
        json!({"request_id": self.request_id, "result": self.result})
    }
}

impl Untold {
    /// A report whose answer is dropped (its call was cancelled before it ended).
    pub fn queue(&self, report: Report) {
        self.queued.lock().unwrap().push(report);
    }

    /// The reports to go with an answer about to be made, each once.
    pub fn take(&self) -> Vec<Report> {
        std::mem::take(&mut *self.queued.lock().unwrap())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queued_report_goes_with_the_next_answer_once() {
        let untold = Untold::default();
        untold.queue(Report::new(json!(1), json!({"error": "x"})));
        untold.queue(Report::new(json!(2), json!({"error": "y"})));
        let taken: Vec<Value> = untold.take().iter().map(|r| r.request_id.clone()).collect();
        assert_eq!(taken, [json!(1), json!(2)]);
        assert!(untold.take().is_empty());
    }
}
