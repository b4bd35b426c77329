//! Processes simulated in one process (tests): a mailbox per process.

use super::lock;
use super::{Payload, Transport};
use crate::error::Result;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// The mailboxes of `n` simulated processes.
pub struct LoopbackHub {
    boxes: Vec<Mutex<VecDeque<Payload>>>,
}

impl LoopbackHub {
    pub fn new(n: u32) -> Arc<LoopbackHub> {
        Arc::new(LoopbackHub { boxes: (0..n).map(|_| Mutex::new(VecDeque::new())).collect() })
    }

    /// The transport of process `me`.
    pub fn endpoint(self: &Arc<Self>, me: u32) -> Box<dyn Transport> {
        Box::new(Endpoint { hub: Arc::clone(self), me })
    }
}

struct Endpoint {
    hub: Arc<LoopbackHub>,
    me: u32,
}

impl Transport for Endpoint {
    fn process(&self) -> u32 {
        self.me
    }

    fn send(&self, to: u32, frame: Payload) -> Result<()> {
        match self.hub.boxes.get(to as usize) {
            Some(b) => {
                lock(b).push_back(frame);
                Ok(())
            }
            None => Err(crate::error::RtError::internal(format!("no process {to} in the loopback hub"))),
        }
    }

    fn poll(&self) -> Result<Vec<Payload>> {
        Ok(lock(&self.hub.boxes[self.me as usize]).drain(..).collect())
    }
}
