{{/* The base of every object's name ("nodetopo" for a release named nodetopo). */}}
{{- define "nodetopo.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Component names: objects, selector labels, Leases and scheduler names are made from these. For
the release "nodetopo" in the namespace "nodetopo" every object is the one deploy/ has
(tests/kube/test_chart.py compares them). */}}
{{- define "nodetopo.agent" -}}{{ include "nodetopo.fullname" . }}-agent{{- end -}}
{{- define "nodetopo.extender" -}}{{ include "nodetopo.fullname" . }}-extender{{- end -}}
{{- define "nodetopo.scheduler" -}}{{ include "nodetopo.fullname" . }}-scheduler{{- end -}}
{{- define "nodetopo.summaryController" -}}{{ include "nodetopo.fullname" . }}-summary-controller{{- end -}}
{{- define "nodetopo.reader" -}}{{ include "nodetopo.fullname" . }}-reader{{- end -}}
{{- define "nodetopo.exportController" -}}{{ include "nodetopo.fullname" . }}-export-controller{{- end -}}
{{- define "nodetopo.probeEvents" -}}{{ include "nodetopo.fullname" . }}-probe-events{{- end -}}

{{/* Labels on every object. */}}
{{- define "nodetopo.labels" -}}
app.kubernetes.io/part-of: nodetopo
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The nodetopo image of a component: each empty field of its `image` takes the top-level one.
Call with (dict "root" $ "image" .Values.<component>.image). */}}
{{- define "nodetopo.image" -}}
{{- $top := .root.Values.image -}}
{{- $own := .image | default dict -}}
{{- $repository := $own.repository | default $top.repository -}}
{{- $digest := $own.digest | default $top.digest -}}
{{- if $digest -}}
{{ $repository }}@{{ $digest }}
{{- else -}}
{{ $repository }}:{{ $own.tag | default $top.tag | default .root.Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{- define "nodetopo.pullPolicy" -}}
{{- (.image | default dict).pullPolicy | default .root.Values.image.pullPolicy -}}
{{- end -}}

{{/* A component's service account: its serviceAccount.name, else "<default>". */}}
{{- define "nodetopo.serviceAccountName" -}}
{{- .values.serviceAccount.name | default .default -}}
{{- end -}}
{{- define "nodetopo.agent.serviceAccountName" -}}
{{- .Values.agent.serviceAccount.name | default (include "nodetopo.agent" .) -}}
{{- end -}}
{{- define "nodetopo.extender.serviceAccountName" -}}
{{- .Values.extender.serviceAccount.name | default (include "nodetopo.extender" .) -}}
{{- end -}}
{{- define "nodetopo.scheduler.serviceAccountName" -}}
{{- .Values.scheduler.serviceAccount.name | default (include "nodetopo.scheduler" .) -}}
{{- end -}}
{{- define "nodetopo.summaryController.serviceAccountName" -}}
{{- .Values.admission.summaryController.serviceAccount.name | default (include "nodetopo.summaryController" .) -}}
{{- end -}}

{{/* A component's ServiceAccount object, when serviceAccount.create. */}}
{{- define "nodetopo.serviceAccount" -}}
{{- if .values.serviceAccount.create }}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ include "nodetopo.serviceAccountName" . }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "nodetopo.labels" .root | nindent 4 }}
    {{- with .labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .values.serviceAccount.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
automountServiceAccountToken: true
{{- end }}
{{- end -}}

{{/* The pod-spec fields every component shares: placement, pull secrets. */}}
{{- define "nodetopo.placement" -}}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
