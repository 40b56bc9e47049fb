//! Fragmentation metrics (paper Section 3.2, Appendix C). Owned by the metric work; see docs/architecture.md.
