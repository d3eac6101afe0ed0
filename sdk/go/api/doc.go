// Package api is the Go SDK's generated layer: the public REST API's
// models and a client for each of its operations, generated from its
// OpenAPI document by oapi-codegen (see oapi-codegen.yaml). Package
// paysched wraps it with what a payments client needs (idempotency keys,
// retries, pages, typed errors); Client.API reaches any operation here
// through the same retries and credentials.
package api
