module capmaas.local/pause

go 1.26
