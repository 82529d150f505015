//! The `parse` and `preview` subcommands (to be written).
