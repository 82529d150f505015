//! From parsed samples to heartbeat metrics (to be written).
