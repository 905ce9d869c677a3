{{/* The one image of every component: image.repository:image.tag (tag default: appVersion). */}}
{{- define "gpusched.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}
