//! Processes simulated in one process (tests): a mailbox per process.

use super::lock;
use super::{Payload, Transport};
use crate::error::{Result, RtError};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// The mailboxes of `n` simulated processes.
pub struct LoopbackHub {
    boxes: Vec<Mutex<VecDeque<Payload>>>,
    /// Per receiver, the data of split frames with their sender (queued
    /// before the header, so it is there once the header is polled).
    data: Vec<Mutex<VecDeque<(u32, Payload)>>>,
}

impl LoopbackHub {
    pub fn new(n: u32) -> Arc<LoopbackHub> {
        let boxes = (0..n).map(|_| Mutex::new(VecDeque::new())).collect();
        let data = (0..n).map(|_| Mutex::new(VecDeque::new())).collect();
        Arc::new(LoopbackHub { boxes, data })
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
            None => Err(RtError::internal(format!("no process {to} in the loopback hub"))),
        }
    }

    fn send_split(&self, to: u32, header: Payload, data: Payload) -> Result<()> {
        let Some(q) = self.hub.data.get(to as usize) else {
            return Err(RtError::internal(format!("no process {to} in the loopback hub")));
        };
        lock(q).push_back((self.me, data));
        self.send(to, header)
    }

    fn receive_data(&self, from: u32, into: &mut [u8]) -> Result<()> {
        let mut q = lock(&self.hub.data[self.me as usize]);
        let Some(at) = q.iter().position(|(p, _)| *p == from) else {
            return Err(RtError::internal(format!("no data from process {from} follows its header")));
        };
        let (_, data) = q.remove(at).expect("position found above");
        if data.len() != into.len() {
            return Err(RtError::internal(format!("{} bytes of data follow, {} expected", data.len(), into.len())));
        }
        into.copy_from_slice(&data);
        Ok(())
    }

    fn poll(&self) -> Result<Vec<Payload>> {
        Ok(lock(&self.hub.boxes[self.me as usize]).drain(..).collect())
    }
}
