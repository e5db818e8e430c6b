package fencekit

// Version is the module's release version, without the leading "v" of its tag: release
// vX.Y.Z is tagged on main once this constant reads "X.Y.Z" and CHANGELOG.md has a section
// for it. It is the one definition of the version; the tracing package reports it as its
// instrumentation version.
const Version = "0.1.0"
