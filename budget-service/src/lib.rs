//! Budget service (being written).
