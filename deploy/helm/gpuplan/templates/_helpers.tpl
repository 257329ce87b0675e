{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "gpuplan.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Resource name prefix: the release name, with the chart name unless it contains it. */}}
{{- define "gpuplan.fullname" -}}
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

{{/* Name of one component's resources, e.g. "<fullname>-agent" (kept under 63 characters). */}}
{{- define "gpuplan.componentName" -}}
{{- printf "%s-%s" (include "gpuplan.fullname" .root | trunc (int (sub 62 (len .component))) | trimSuffix "-") .component }}
{{- end }}

{{- define "gpuplan.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every resource; call with (dict "root" $ "component" "api"). */}}
{{- define "gpuplan.labels" -}}
helm.sh/chart: {{ include "gpuplan.chart" .root }}
{{ include "gpuplan.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: gpuplan
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The labels a selector matches on; they never change after install. */}}
{{- define "gpuplan.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpuplan.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "gpuplan.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gpuplan.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* An image reference: repository:tag, or repository@digest; call with (dict "image" ... "root" $). */}}
{{- define "gpuplan.image" -}}
{{- if .image.digest }}
{{- printf "%s@%s" .image.repository .image.digest }}
{{- else }}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag) }}
{{- end }}
{{- end }}

{{/* Whether the Prometheus Operator's objects may be rendered. */}}
{{- define "gpuplan.monitoringCRDs" -}}
{{- if or .Values.monitoring.assumeCRDs (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1") }}true{{ end }}
{{- end }}

{{- define "gpuplan.redisEnabled" -}}
{{- if or .Values.redis.internal.enabled .Values.redis.external.enabled }}true{{ end }}
{{- end }}

{{/* Name of the Secret holding the external Redis URL. */}}
{{- define "gpuplan.redisSecretName" -}}
{{- if .Values.redis.external.existingSecret }}
{{- .Values.redis.external.existingSecret }}
{{- else }}
{{- include "gpuplan.componentName" (dict "root" . "component" "redis-url") }}
{{- end }}
{{- end }}

{{/* One environment variable named .name holding the Redis URL, or nothing without Redis. */}}
{{- define "gpuplan.redisUrlEnv" -}}
{{- $root := .root }}
{{- if $root.Values.redis.internal.enabled }}
- name: {{ .name }}
  value: {{ printf "redis://%s:6379/0" (include "gpuplan.componentName" (dict "root" $root "component" "redis")) | quote }}
{{- else if $root.Values.redis.external.enabled }}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ include "gpuplan.redisSecretName" $root }}
      key: {{ $root.Values.redis.external.existingSecretKey }}
{{- end }}
{{- end }}

{{/* Refuse contradictory values with a message instead of a broken install. */}}
{{- define "gpuplan.validate" -}}
{{- if and .Values.redis.internal.enabled .Values.redis.external.enabled }}
{{- fail "redis.internal.enabled and redis.external.enabled are exclusive: pick one Redis" }}
{{- end }}
{{- if and .Values.redis.external.enabled (not (or .Values.redis.external.existingSecret .Values.redis.external.url)) }}
{{- fail "redis.external.enabled needs redis.external.existingSecret or redis.external.url" }}
{{- end }}
{{- if and .Values.worker.enabled (not (include "gpuplan.redisEnabled" .)) }}
{{- fail "worker.enabled needs a Redis for the job queue: redis.internal.enabled or redis.external.enabled" }}
{{- end }}
{{- if and .Values.worker.enabled .Values.worker.autoscaling.enabled (gt (int .Values.worker.autoscaling.minReplicas) (int .Values.worker.autoscaling.maxReplicas)) }}
{{- fail "worker.autoscaling.minReplicas must not exceed worker.autoscaling.maxReplicas" }}
{{- end }}
{{- if and .Values.api.autoscaling.enabled (gt (int .Values.api.autoscaling.minReplicas) (int .Values.api.autoscaling.maxReplicas)) }}
{{- fail "api.autoscaling.minReplicas must not exceed api.autoscaling.maxReplicas" }}
{{- end }}
{{- end }}

{{/* Egress every gpuplan pod needs: DNS, and Redis when one is configured. */}}
{{- define "gpuplan.egressRules" -}}
{{- $root := .root }}
{{- $np := $root.Values.networkPolicy }}
- to:
    {{- toYaml $np.dns.to | nindent 4 }}
  ports:
    - protocol: UDP
      port: {{ $np.dns.port }}
    - protocol: TCP
      port: {{ $np.dns.port }}
{{- if $root.Values.redis.internal.enabled }}
- to:
    - podSelector:
        matchLabels:
          {{- include "gpuplan.selectorLabels" (dict "root" $root "component" "redis") | nindent 10 }}
  ports:
    - protocol: TCP
      port: 6379
{{- else if $root.Values.redis.external.enabled }}
- ports:
    - protocol: TCP
      port: {{ $root.Values.redis.external.port }}
  {{- with $root.Values.redis.external.networkPolicyPeers }}
  to:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- end }}

{{/* Pod annotations: a checksum of a chart-made Redis Secret (a changed URL rolls the
pods), and the user's; call with (dict "root" $ "extra" .Values.api.podAnnotations). */}}
{{- define "gpuplan.podAnnotations" -}}
{{- $root := .root }}
{{- $out := dict }}
{{- if and $root.Values.redis.external.enabled (not $root.Values.redis.external.existingSecret) }}
{{- $_ := set $out "checksum/redis-url" ($root.Values.redis.external.url | sha256sum) }}
{{- end }}
{{- $out = merge $out (.extra | default dict) }}
{{- with $out }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
