//! Launch registry: lets every device of one kernel launch find the same
//! runtime instance. OWNER: semaphore/DMA helper.

pub struct LaunchRegistry {}
