{{/* Names and labels shared by every template. */}}
{{- define "longrun.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "longrun.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "longrun.labels" -}}
{{ include "longrun.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "longrun.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "longrun.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The model catalog's ConfigMap. */}}
{{- define "longrun.catalogName" -}}
{{- printf "%s-model-catalog" (include "longrun.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "longrun.runnerImage" -}}
{{- printf "%s:%s" .Values.runner.image.repository (default .Chart.AppVersion .Values.runner.image.tag) -}}
{{- end -}}

{{/* Namespaces where runs execute: the watched ones, or the release namespace when all are watched. */}}
{{- define "longrun.runNamespaces" -}}
{{- $namespaces := list .Release.Namespace -}}
{{- range .Values.controller.watchNamespaces -}}
{{- $namespaces = append $namespaces . -}}
{{- end -}}
{{- $namespaces | uniq | toJson -}}
{{- end -}}

{{/* "true" when the address is a loopback one (127.0.0.0/8 or ::1), else empty. */}}
{{- define "longrun.isLoopback" -}}
{{- if or (hasPrefix "127." .) (eq . "::1") -}}true{{- end -}}
{{- end -}}
