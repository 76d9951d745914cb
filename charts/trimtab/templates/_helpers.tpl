{{/*
Names and labels shared by every template. The fullname is the release name when it already
contains the chart name, so `helm install trimtab` yields Service trimtab, the address that
`trimtab envoy-bootstrap` and deploy/envoy/ point Envoys at.
*/}}
{{- define "trimtab.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "trimtab.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "trimtab.pickerService" -}}
{{- .Values.inferenceExtension.pickerService | default (printf "%s-picker" (include "trimtab.fullname" .) | trunc 63 | trimSuffix "-") }}
{{- end }}

{{- define "trimtab.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "trimtab.selectorLabels" -}}
app.kubernetes.io/name: {{ include "trimtab.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "trimtab.labels" -}}
helm.sh/chart: {{ include "trimtab.chart" . }}
{{ include "trimtab.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: trimtab
{{- end }}

{{- define "trimtab.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "trimtab.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "trimtab.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
`trimtab run` arguments. Exactly one of --all-namespaces or --namespace (repeated).
*/}}
{{- define "trimtab.args" -}}
- run
{{- if .Values.watch.allNamespaces }}
- --all-namespaces
{{- else }}
{{- range .Values.watch.namespaces }}
- --namespace={{ . }}
{{- end }}
{{- end }}
- --liveness-port={{ .Values.ports.liveness }}
- --metrics-port={{ .Values.ports.metrics }}
- --xds-port={{ .Values.ports.xds }}
- --log-format={{ .Values.operator.logFormat }}
{{- if .Values.xds.tls.enabled }}
- --xds-tls-cert=/etc/trimtab/xds-tls/tls.crt
- --xds-tls-key=/etc/trimtab/xds-tls/tls.key
- --xds-client-ca=/etc/trimtab/xds-tls/ca.crt
{{- end }}
{{- with .Values.xds.nodeIdPattern }}
- {{ printf "--xds-node-id-pattern=%s" . | quote }}
{{- end }}
{{- range .Values.tenancy.prometheusUrls }}
- {{ printf "--prometheus-url=%s%s" (ternary (printf "%s=" .namespace) "" (not (empty .namespace))) .url | quote }}
{{- end }}
{{- range .Values.tenancy.prometheusTokens }}
- {{ printf "--prometheus-token=%s%s=%s" (ternary (printf "%s/" .namespace) "" (not (empty .namespace))) .name (.file | default (printf "/etc/trimtab/tokens/%s/%s" .name .key)) | quote }}
{{- end }}
{{- if .Values.rbac.readSecrets }}
- --allow-secret-tokens
{{- end }}
{{- if .Values.tenancy.staticEndpoints }}
- --allow-static-endpoints
{{- end }}
{{- with .Values.tenancy.envoyFileDir }}
- {{ printf "--envoy-file-dir=%s" . | quote }}
{{- end }}
{{- if not (kindIs "invalid" .Values.tenancy.maxMetricsBytes) }}
- --max-metrics-bytes={{ int .Values.tenancy.maxMetricsBytes }}
{{- end }}
# Every replica balances and serves xDS; the Lease (in $POD_NAMESPACE) picks the one that
# writes status and events. Harmless with a single replica.
- --leader-election
{{- if .Values.targets.gatewayAPI.enabled }}
- --gateway-api
{{- end }}
{{- if .Values.inferenceExtension.enabled }}
# The endpoint picker of GIE InferencePools that name the picker Service (docs/gateway-api.md).
- --picker-port={{ .Values.inferenceExtension.pickerPort }}
- --inference-extension
- --picker-service={{ include "trimtab.pickerService" . }}:{{ .Values.inferenceExtension.pickerPort }}
{{- end }}
{{- range .Values.operator.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/*
Rules for the namespaces whose pools trimtab balances: a ClusterRole when it watches all of
them, one Role per namespace otherwise. docs/install.md lists the same rules and
tests/chart/test_rbac.py keeps the two equal.
*/}}
{{- define "trimtab.poolRules" -}}
# The pool's members: membership, IPs, readiness. trimtab never changes pods.
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch]
# kopf patches the pool itself for its finalizer and progress annotations.
- apiGroups: [trimtab.io]
  resources: [inferencepools]
  verbs: [get, list, watch, patch]
- apiGroups: [trimtab.io]
  resources: [inferencepools/status]
  verbs: [patch]
# kopf posts core/v1 Events with POST only (it never uses events.k8s.io nor patches events).
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- if .Values.rbac.readSecrets }}
# Prometheus bearer tokens named by spec.metrics.prometheus.bearerTokenSecretRef.
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
{{- end }}
{{- if .Values.targets.envoyFile.enabled }}
# envoyFile target: ClusterLoadAssignment ConfigMaps that file-EDS Envoys mount. trimtab
# merge-patches its key and creates the ConfigMap on a 404; it never reads or replaces one.
- apiGroups: [""]
  resources: [configmaps]
  verbs: [create, patch]
{{- end }}
{{- if .Values.targets.gatewayAPI.enabled }}
# gatewayAPI target: a selector-less Service plus EndpointSlices per weight tier, and one
# HTTPRoute rule's backendRefs (a JSON patch tested against resourceVersion). RBAC cannot
# limit by label: trimtab reads an object first and updates or deletes it only if it carries
# its trimtab.io/pool and trimtab.io/target labels (docs/gateway-api.md).
- apiGroups: [""]
  resources: [services]
  verbs: [get, list, create, update, delete]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, create, update, delete]
- apiGroups: [gateway.networking.k8s.io]
  resources: [httproutes]
  verbs: [get, patch]
- apiGroups: [gateway.networking.k8s.io]
  resources: [referencegrants]
  verbs: [list]
{{- end }}
{{- if .Values.inferenceExtension.enabled }}
# GIE InferencePools (inference.networking.k8s.io) that name trimtab's picker: read only.
- apiGroups: [inference.networking.k8s.io]
  resources: [inferencepools]
  verbs: [get, list, watch]
{{- end }}
{{- end }}
