// Package debug is what istiod shows of itself to operators and istioctl:
// the sync status of connected proxies (SyncStatus, served on
// /debug/syncz to loopback callers), how istiod names itself
// (ControlPlane), and the /debug pages istioctl's x internal-debug asks
// for over ADS (Pages, TypeDebug), with who may read which and the
// bounds on what a client asks and what a page holds.
//
// It is apart from the ADS server because none of it serves a proxy: the
// server authenticates debug clients (Caller) and hands this package the
// state it shows, through functions, and this package decides what is
// shown, to whom, and in which of Istio's formats.
package debug
