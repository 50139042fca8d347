module github.com/zygo-run/zygo/sdk/go

go 1.26.8
