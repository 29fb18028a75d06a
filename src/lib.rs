//! rpma
