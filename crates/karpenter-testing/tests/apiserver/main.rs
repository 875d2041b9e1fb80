//! The in-process API server through the real kube client: one test binary for every file, so the workspace
//! links (and CI stores) one executable of this size instead of seven.
#![cfg(feature = "apiserver")]

mod apiserver_controllers;
mod apiserver_pods;
mod apiserver_probe;
mod apiserver_semantics;
mod apiserver_standins;
mod apiserver_tcp;
mod apiserver_watch;
