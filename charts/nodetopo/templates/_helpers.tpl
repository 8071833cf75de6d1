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

{{- define "nodetopo.agent" -}}{{ include "nodetopo.fullname" . }}-agent{{- end -}}
{{- define "nodetopo.extender" -}}{{ include "nodetopo.fullname" . }}-extender{{- end -}}

{{/* Labels on every object. */}}
{{- define "nodetopo.labels" -}}
app.kubernetes.io/part-of: nodetopo
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "nodetopo.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* A file shipped under files/, moved to the release namespace, names and image: every object name
(and the selector labels, role and policy references, Lease and scheduler names made from them)
"nodetopo-<part>" becomes "<fullname>-<part>", so two releases never share an object. For the release
"nodetopo" in the namespace "nodetopo" the objects are those of deploy/ (tests/kube/test_chart.py). */}}
{{- define "nodetopo.renamed" -}}
{{- $text := regexReplaceAll "\\bnodetopo-(extender|scheduler|annotations|topology|summary-controller|summary-writer)\\b" .text (printf "%s-${1}" (include "nodetopo.fullname" .root)) -}}
{{- $text = replace ".nodetopo.svc:" (printf ".%s.svc:" .root.Release.Namespace) $text -}}
{{- $text -}}
{{- end -}}

{{- define "nodetopo.shipped" -}}
{{- $text := .root.Files.Get .file -}}
{{- $text = regexReplaceAll "(?m)(^\\s*|[{,] *)namespace: nodetopo( *[},]|$)" $text (printf "${1}namespace: %s${2}" .root.Release.Namespace) -}}
{{- $text = include "nodetopo.renamed" (dict "root" .root "text" $text) -}}
{{- range $pair := .replace | default list -}}
{{- $text = replace (first $pair) (last $pair) $text -}}
{{- end -}}
{{- $text = replace "image: ghcr.io/nodetopo/nodetopo:0.1.0" (printf "image: %s" (include "nodetopo.image" .root)) $text -}}
{{- range $doc := regexSplit "(?m)^---\\s*$" $text -1 }}
{{- $obj := fromYaml $doc }}
{{- if $obj }}
{{- $meta := $obj.metadata }}
{{- $_ := set $meta "labels" (merge (dict) (fromYaml (include "nodetopo.labels" $.root)) ($meta.labels | default dict)) }}
{{- if and $.deployment (eq $obj.kind "Deployment") }}
{{- $_ := set $obj.spec "replicas" $.deployment.replicas }}
{{- $pod := $obj.spec.template.spec }}
{{- $_ := set $pod "priorityClassName" $.deployment.priorityClassName }}
{{- $_ := set (first $pod.containers) "resources" $.deployment.resources }}
{{- if $.deployment.image }}
{{- $_ := set (first $pod.containers) "image" (printf "%s:%s" $.deployment.image.repository $.deployment.image.tag) }}
{{- end }}
{{- end }}
---
{{ toYaml $obj }}
{{- end }}
{{- end }}
{{- end -}}
