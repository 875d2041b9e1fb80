//! moto catalogue loader.
