//! Applications weir runs (an `app` on a site, what Tako does): the
//! processes of each instance started with where to listen (`PORT` and
//! `HOST`, or `SOCKET`), their output in weir's log, readiness by an HTTP
//! check, stops by SIGTERM then SIGKILL to the whole process group, and
//! restarts with exponential back-off (`process`); an app's instances in
//! the slots of its proxy, rolling restarts and scale to zero
//! (`supervisor`).
//!
//! Never blocks a worker thread (processes are tokio's), never leaves a
//! process group running after its instance is stopped, and never reads
//! an env file others can read.

pub mod process;
pub mod supervisor;

pub use supervisor::{App, Phase, Refused};
