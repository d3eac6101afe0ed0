module github.com/paysched/paysched/sdk/go

go 1.26.0

require (
	github.com/oapi-codegen/runtime v1.9.0
	golang.org/x/oauth2 v0.38.0
)

require (
	github.com/apapsch/go-jsonmerge/v2 v2.0.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
)
