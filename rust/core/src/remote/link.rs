//! A launch's connection to the other processes of the job.

use super::detect::Waves;
use super::lock;
use super::wire::{Envelope, GlobalKey, Msg};
use super::Node;
use crate::dma::remote::{IncomingDma, OutgoingDma};
use crate::error::Result;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// One launch's end of the job: who owns which device, the counts of
/// messages sent and received (termination detection), and messages that
/// arrived before what they name was allocated here.
pub struct Link {
    node: Arc<Node>,
    key: GlobalKey,
    /// The process of each device.
    owners: Arc<[u32]>,
    me: u32,
    /// The other processes that own devices of the launch, ascending.
    peers: Vec<u32>,
    sent: AtomicU64,
    received: AtomicU64,
    /// Bumped by every counted message received (part of a status's epoch).
    epoch: AtomicU64,
    next_dma: AtomicU64,
    /// Messages waiting for a semaphore or buffer to be allocated here.
    held: Mutex<Vec<Envelope>>,
    /// Peers that have left the launch.
    left: Mutex<Vec<u32>>,
    pub(crate) waves: Mutex<Waves>,
    /// On_wait DMAs started here to another process, until read.
    outgoing: Mutex<HashMap<u64, Arc<OutgoingDma>>>,
    /// On_wait DMAs from other processes, by (process, id), until written.
    incoming: Mutex<HashMap<(u32, u64), Arc<IncomingDma>>>,
}

impl Link {
    pub fn new(node: Arc<Node>, key: GlobalKey, owners: Arc<[u32]>) -> Link {
        let me = node.process();
        let mut peers: Vec<u32> = owners.iter().copied().filter(|&p| p != me).collect();
        peers.sort_unstable();
        peers.dedup();
        Link {
            node,
            key,
            owners,
            me,
            peers,
            sent: AtomicU64::new(0),
            received: AtomicU64::new(0),
            epoch: AtomicU64::new(0),
            next_dma: AtomicU64::new(1),
            held: Mutex::new(Vec::new()),
            left: Mutex::new(Vec::new()),
            waves: Mutex::new(Waves::default()),
            outgoing: Mutex::new(HashMap::new()),
            incoming: Mutex::new(HashMap::new()),
        }
    }

    /// The node's driver (see [`super::Driver`]).
    pub fn driver(&self) -> Option<super::Driver> {
        self.node.driver()
    }

    pub fn key(&self) -> GlobalKey {
        self.key
    }

    pub fn process(&self) -> u32 {
        self.me
    }

    pub fn peers(&self) -> &[u32] {
        &self.peers
    }

    /// The process that owns `device` (this one for an unknown device: the
    /// range check is the caller's).
    #[inline]
    pub fn owner(&self, device: u32) -> u32 {
        self.owners.get(device as usize).copied().unwrap_or(self.me)
    }

    #[inline]
    pub fn is_remote(&self, device: u32) -> bool {
        self.owner(device) != self.me
    }

    /// Whether `device` is owned here, per device.
    pub fn local_mask(&self) -> Vec<bool> {
        self.owners.iter().map(|&p| p == self.me).collect()
    }

    /// A new id for an on_wait DMA started here.
    pub fn next_dma_id(&self) -> u64 {
        self.next_dma.fetch_add(1, Ordering::Relaxed)
    }

    /// Sends `msg` to process `to`.
    pub fn send(&self, to: u32, msg: Msg) -> Result<()> {
        if msg.counted() {
            self.sent.fetch_add(1, Ordering::SeqCst);
        }
        self.node.send(to, self.key, msg)
    }

    /// Sends `msg` to every peer.
    pub fn broadcast(&self, msg: &Msg) -> Result<()> {
        for &p in &self.peers {
            self.send(p, msg.clone())?;
        }
        Ok(())
    }

    /// Counts a message received (before it is applied).
    pub fn note_received(&self, msg: &Msg) {
        if msg.counted() {
            self.received.fetch_add(1, Ordering::SeqCst);
            self.epoch.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// (sent, received, epoch) of counted messages.
    pub fn counts(&self) -> (u64, u64, u64) {
        (self.sent.load(Ordering::SeqCst), self.received.load(Ordering::SeqCst), self.epoch.load(Ordering::SeqCst))
    }

    /// Keeps `frame` until what it names is allocated here.
    pub fn hold(&self, frame: Envelope) {
        lock(&self.held).push(frame);
    }

    /// Takes every held frame (to be tried again, in arrival order).
    pub fn take_held(&self) -> Vec<Envelope> {
        std::mem::take(&mut *lock(&self.held))
    }

    pub fn held_count(&self) -> usize {
        lock(&self.held).len()
    }

    /// Peer `p` left; whether every peer has now.
    pub fn peer_left(&self, p: u32) -> bool {
        let mut left = lock(&self.left);
        if !left.contains(&p) {
            left.push(p);
        }
        self.peers.iter().all(|q| left.contains(q))
    }

    pub fn all_peers_left(&self) -> bool {
        let left = lock(&self.left);
        self.peers.iter().all(|q| left.contains(q))
    }

    pub(crate) fn register_outgoing(&self, id: u64, dma: Arc<OutgoingDma>) {
        lock(&self.outgoing).insert(id, dma);
    }

    /// The outgoing DMA `id`, forgotten here (it is read once).
    pub(crate) fn take_outgoing(&self, id: u64) -> Option<Arc<OutgoingDma>> {
        lock(&self.outgoing).remove(&id)
    }

    pub(crate) fn register_incoming(&self, from: u32, id: u64, dma: Arc<IncomingDma>) {
        lock(&self.incoming).insert((from, id), dma);
    }

    pub(crate) fn take_incoming(&self, from: u32, id: u64) -> Option<Arc<IncomingDma>> {
        lock(&self.incoming).remove(&(from, id))
    }
}
