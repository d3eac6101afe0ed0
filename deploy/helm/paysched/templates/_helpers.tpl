{{/*
paysched's chart renders the kustomize base (files/base, a copy of
deploy/k8s/base that deploy/k8s's tests hold equal to it), object by object,
with the installation's values applied: names of your Secrets, your own
databases and brokers, the image, and each component's replicas,
resources, disruption budget, spread, environment and placement.
*/}}

{{/* paysched.files: the base files this release renders, by its switches. */}}
{{- define "paysched.files" -}}
{{- $v := .Values -}}
{{- $f := list "serviceaccount.yaml" "migrate-job.yaml" "payments-api.yaml" "admin-api.yaml" "sweeper.yaml" "executor.yaml" "reaper.yaml" "cdc.yaml" "audit-consumer.yaml" "webhook-dispatcher.yaml" "reconciler.yaml" "networkpolicies.yaml" -}}
{{- if $v.postgres.enabled -}}
{{- $f = concat $f (list "postgres.yaml" "postgres-events.yaml") -}}
{{- /* the clusters' custom metrics queries: a ConfigMap the Cluster names, whether scraped or not */ -}}
{{- $f = append $f "postgres-monitoring.yaml" -}}
{{- end -}}
{{- if $v.kafka.enabled -}}{{- $f = append $f "kafka.yaml" -}}{{- end -}}
{{- if $v.certManager.enabled -}}{{- $f = append $f "internal-tls.yaml" -}}{{- end -}}
{{- if $v.prometheus.enabled -}}{{- $f = concat $f (list "monitoring.yaml" "prometheusrule.yaml") -}}{{- end -}}
{{- toJson $f -}}
{{- end -}}

{{/* paysched.renames: base name -> this installation's, for the names an operator may choose. */}}
{{- define "paysched.renames" -}}
{{- $v := .Values -}}
{{- $r := dict "paysched-secrets" $v.secrets.app.existingSecret "paysched-console" $v.secrets.console.existingSecret "paysched-jwks" $v.secrets.jwks.existingConfigMap "paysched-api-tls" $v.secrets.tls.api "paysched-grpc-tls" $v.secrets.tls.grpc "paysched-webhooks-tls" $v.secrets.tls.webhooks -}}
{{- range $k, $name := $v.secrets.database -}}{{- $_ := set $r (printf "paysched-pg-%s" $k) $name -}}{{- end -}}
{{- $_ := set $r "ingressClassName: nginx" (printf "ingressClassName: %s" $v.ingress.className) -}}
{{- $_ := set $r "api.paysched.example.com" $v.ingress.hosts.api -}}
{{- $_ := set $r "grpc.paysched.example.com" $v.ingress.hosts.grpc -}}
{{- $_ := set $r "webhooks.paysched.example.com" $v.ingress.hosts.webhooks -}}
{{- if not $v.postgres.enabled -}}
{{- $_ := set $r "paysched-pg-ca" (required "postgres.external.caSecret is required when postgres.enabled is false" $v.postgres.external.caSecret) -}}
{{- $_ := set $r "paysched-pg-events-ca" (required "postgres.external.eventsCaSecret is required when postgres.enabled is false" $v.postgres.external.eventsCaSecret) -}}
{{- $_ := set $r "paysched-pg-rw:5432" (printf "%s:%v" (required "postgres.external.host is required when postgres.enabled is false" $v.postgres.external.host) $v.postgres.external.port) -}}
{{- $_ := set $r "paysched-pg-events-rw:5432" (printf "%s:%v" (required "postgres.external.eventsHost is required when postgres.enabled is false" $v.postgres.external.eventsHost) $v.postgres.external.eventsPort) -}}
{{- $_ := set $r "paysched-pg-app" (required "postgres.external.ownerSecret is required when postgres.enabled is false" $v.postgres.external.ownerSecret) -}}
{{- $_ := set $r "paysched-pg-events-app" (required "postgres.external.eventsOwnerSecret is required when postgres.enabled is false" $v.postgres.external.eventsOwnerSecret) -}}
{{- end -}}
{{- if not $v.kafka.enabled -}}
{{- $_ := set $r "paysched-cluster-ca-cert" (required "kafka.external.caSecret is required when kafka.enabled is false" $v.kafka.external.caSecret) -}}
{{- $_ := set $r "paysched-cdc" $v.kafka.external.users.cdc -}}
{{- $_ := set $r "paysched-audit-consumer" $v.kafka.external.users.auditConsumer -}}
{{- $_ := set $r "paysched-webhook-dispatcher" $v.kafka.external.users.webhookDispatcher -}}
{{- end -}}
{{- toJson $r -}}
{{- end -}}

{{/* paysched.image: the image by digest; the zero digest fails, as in the prod overlay. */}}
{{- define "paysched.image" -}}
{{- $i := .Values.image -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" $i.digest) -}}
{{- fail (printf "image.digest %q: want sha256:<64 hex digits>" $i.digest) -}}
{{- end -}}
{{- if eq $i.digest "sha256:0000000000000000000000000000000000000000000000000000000000000000" -}}
{{- fail "image.digest is the zero placeholder: set the released image's digest" -}}
{{- end -}}
{{- printf "%s/%s@%s" $i.registry $i.repository $i.digest -}}
{{- end -}}

{{/* paysched.labels: Helm's labels, beside the base's. */}}
{{- define "paysched.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: paysched
{{- end -}}
