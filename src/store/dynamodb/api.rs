//! The few DynamoDB requests the store makes (JSON over one signed POST each), and what their
//! answers mean to dlock: GetItem and conditional PutItem of one item, TransactWriteItems of
//! several (a multi-name grant, renewal or release: all or none), a Scan of keys, and the
//! table's description and creation.
//!
//! An item is `pk` (the record's key), `rec` (the record's JSON body) and `rv`, a random
//! version written with every write: a write is conditional on the `rv` it read (or on
//! `attribute_not_exists(pk)`), so a write made with an old version never succeeds.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::{Value, json};

use crate::store::aws::records::{Cond, Object, Objects, Put};
use crate::store::aws::{self, Response, Service};
use crate::store::{Health, HealthQuery, StoreError, StoreResult};

/// One table, whose string partition key is `pk`.
pub struct Table {
    pub svc: Service,
    pub name: String,
    /// `?create=1`: a request that finds the table missing creates it (once) and is sent again.
    pub create: bool,
    pub created: tokio::sync::OnceCell<()>,
}

/// What a missing table's error says, after its name.
pub const MISSING: &str = "does not exist: create it (string partition key pk, no sort key), \
                           or add ?create=1 to the store URL";

/// A table's key schema as dlock needs it: `pk`, a string, the only key.
pub const SCHEMA: &str = "the string partition key pk and no sort key";

/// An answer's error type (the part after `#` of `__type`) and message, printable.
pub fn error_type(body: &[u8]) -> (String, String) {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let text = |k: &str| v[k].as_str().unwrap_or("").to_string();
    let kind = text("__type");
    let kind = kind.rsplit('#').next().unwrap_or("").to_string();
    let message = match text("message") {
        m if m.is_empty() => text("Message"),
        m => m,
    };
    let printable = |s: String| s.chars().filter(|c| !c.is_control()).take(200).collect();
    (printable(kind), printable(message))
}

impl Table {
    /// One request: `action` (`GetItem`, ...) with its JSON body. The table is not looked up
    /// before use (a DescribeTable per command would be one more round trip on every one): a
    /// missing table answers ResourceNotFoundException, a table with another key a
    /// ValidationException (`failure` turns both into 78), and with `?create=1` the missing
    /// table is created and the request sent again.
    async fn call(&self, action: &str, body: Value) -> StoreResult<(Response, Value)> {
        let (r, v) = self.send(action, &body).await?;
        if !(self.create && r.status == 400) || error_type(&r.body).0 != "ResourceNotFoundException"
        {
            return Ok((r, v));
        }
        self.created.get_or_try_init(|| self.create()).await?;
        self.send(action, &body).await
    }

    /// One request as it is, whatever the table's state.
    async fn send(&self, action: &str, body: &Value) -> StoreResult<(Response, Value)> {
        let target = format!("DynamoDB_20120810.{action}");
        let extra = [
            ("content-type", "application/x-amz-json-1.0"),
            ("x-amz-target", target.as_str()),
        ];
        let body = Bytes::from(serde_json::to_vec(body).expect("a request serializes"));
        let r = self.svc.send("POST", "/", "", &extra, body).await?;
        let v = match r.status {
            200 => serde_json::from_slice(&r.body).map_err(|e| {
                StoreError::protocol(format!("DynamoDB answered {action} with no JSON ({e})"))
            })?,
            _ => Value::Null,
        };
        Ok((r, v))
    }

    /// The table's description: `None` where it does not exist.
    pub async fn describe(&self) -> StoreResult<Option<Value>> {
        let (r, v) = self
            .send("DescribeTable", &json!({"TableName": self.name}))
            .await?;
        match (r.status, error_type(&r.body).0.as_str()) {
            (200, _) => Ok(Some(v["Table"].clone())),
            (400, "ResourceNotFoundException") => Ok(None),
            _ => Err(self.failure(&r)),
        }
    }

    /// Create the table (`?create=1`), on demand (PAY_PER_REQUEST), and wait until it is
    /// ACTIVE; one that another client created meanwhile is fine.
    pub async fn create(&self) -> StoreResult<()> {
        let request = json!({
            "TableName": self.name,
            "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
            "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
            "BillingMode": "PAY_PER_REQUEST",
        });
        let (r, _) = self.send("CreateTable", &request).await?;
        match (r.status, error_type(&r.body).0.as_str()) {
            (200, _) | (400, "ResourceInUseException") => {}
            _ => return Err(self.failure(&r)),
        }
        // AWS creates a table in seconds; DynamoDB Local at once.
        for _ in 0..120 {
            if let Some(t) = self.describe().await?
                && t["TableStatus"] == "ACTIVE"
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Err(StoreError::unavailable(format!(
            "table {} was created but is not ACTIVE after a minute",
            self.name
        )))
    }

    /// A PutItem of `body` at `key` on condition `cond`, and the new version it writes.
    fn put_request(&self, key: &str, body: Vec<u8>, cond: Cond<'_>) -> (Value, String) {
        let rv = crate::names::new_token();
        let rec = String::from_utf8(body).expect("records are JSON text");
        let mut request = json!({
            "TableName": self.name,
            "Item": {"pk": {"S": key}, "rec": {"S": rec}, "rv": {"S": rv}},
        });
        match cond {
            Cond::Absent => request["ConditionExpression"] = json!("attribute_not_exists(pk)"),
            Cond::Match(seen) => {
                request["ConditionExpression"] = json!("rv = :rv");
                request["ExpressionAttributeValues"] = json!({":rv": {"S": seen}});
            }
        }
        (request, rv)
    }

    /// What an answer dlock did not expect means, as the exit codes tell it.
    pub fn failure(&self, r: &Response) -> StoreError {
        let (kind, message) = error_type(&r.body);
        let said = format!("{} {kind}: {message}", r.status);
        let table = &self.name;
        match kind.as_str() {
            "ResourceNotFoundException" => StoreError::config(format!("table {table} {MISSING}")),
            // A key that does not fit the table's: `pk` is not its (only) key, or not a string.
            "ValidationException"
                if message.contains("key element does not match the schema")
                    || message.contains("conditions on the keys")
                    || message.contains("Type mismatch for key") =>
            {
                StoreError::config(format!(
                    "table {table} does not have {SCHEMA}: dlock cannot use it"
                ))
            }
            "InvalidSignatureException" if message.contains("expired") => StoreError::config(
                "DynamoDB refused the request: this host's clock is too far from AWS's \
                 (the signature expired); set the clock right",
            ),
            "InvalidSignatureException" => StoreError::refused(
                "DynamoDB refused the signature (InvalidSignatureException): check the secret \
                 key (AWS_SECRET_ACCESS_KEY or the profile's)",
            ),
            "UnrecognizedClientException" => StoreError::refused(format!(
                "DynamoDB does not know the access key {} (UnrecognizedClientException)",
                self.svc.creds.access_key
            )),
            "AccessDeniedException" | "MissingAuthenticationTokenException" => {
                StoreError::refused(format!("DynamoDB refused access to table {table} ({said})"))
            }
            "ThrottlingException"
            | "ProvisionedThroughputExceededException"
            | "RequestLimitExceeded"
            | "InternalServerError"
            | "ServiceUnavailable" => StoreError::unavailable(format!("DynamoDB answered {said}")),
            _ if r.status >= 500 => StoreError::unavailable(format!("DynamoDB answered {said}")),
            _ => StoreError::protocol(format!("DynamoDB answered {said}")),
        }
    }
}

/// Whether a `TransactionCanceledException` was caused by other writers only: its reasons
/// (`CancellationReasons`, or the list its message ends with) are failed conditions,
/// conflicts and items that were fine (`None`), with at least one of the first two.
pub fn cancelled_by_conflict(body: &[u8]) -> bool {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let mut codes: Vec<String> = match v["CancellationReasons"].as_array() {
        Some(reasons) => reasons
            .iter()
            .map(|r| r["Code"].as_str().unwrap_or("").to_string())
            .collect(),
        None => Vec::new(),
    };
    if codes.is_empty() {
        let message = error_type(body).1;
        if let Some((_, list)) = message.rsplit_once('[') {
            let list = list.trim_end_matches(']');
            codes = list.split(',').map(|c| c.trim().to_string()).collect();
        }
    }
    let conflict = |c: &str| matches!(c, "ConditionalCheckFailed" | "TransactionConflict");
    codes.iter().any(|c| conflict(c)) && codes.iter().all(|c| conflict(c) || c == "None")
}

/// A string attribute of an item.
fn string<'a>(item: &'a Value, name: &str) -> Option<&'a str> {
    item[name]["S"].as_str()
}

#[async_trait]
impl Objects for Table {
    /// A strongly consistent read: the item as the last write left it.
    async fn get(&self, key: &str) -> StoreResult<Object> {
        let request = json!({
            "TableName": self.name,
            "Key": {"pk": {"S": key}},
            "ConsistentRead": true,
        });
        let (r, v) = self.call("GetItem", request).await?;
        if r.status != 200 {
            return Err(self.failure(&r));
        }
        let date_ms = aws::date_ms(&r)?;
        let item = &v["Item"];
        let body = match (string(item, "rec"), string(item, "rv")) {
            (Some(rec), Some(rv)) => Some((Bytes::from(rec.to_string()), rv.to_string())),
            _ if item.is_null() => None,
            _ => {
                return Err(StoreError::protocol(format!(
                    "the item {key:?} is not dlock's (no rec or rv); is another program \
                     writing to table {}?",
                    self.name
                )));
            }
        };
        Ok(Object { body, date_ms })
    }

    /// `ConditionalCheckFailedException` (the version moved on) and `TransactionConflict`
    /// (a transaction holds the item) are both "not written, read again", never success.
    async fn put(&self, key: &str, body: Vec<u8>, cond: Cond<'_>) -> StoreResult<Option<String>> {
        let (request, rv) = self.put_request(key, body, cond);
        let (r, _) = self.call("PutItem", request).await?;
        match (r.status, error_type(&r.body).0.as_str()) {
            (200, _) => Ok(Some(rv)),
            (400, "ConditionalCheckFailedException" | "TransactionConflictException") => Ok(None),
            _ => Err(self.failure(&r)),
        }
    }

    /// TransactWriteItems' limit on the items of one request.
    fn atomic_limit(&self) -> usize {
        100
    }

    /// One TransactWriteItems of conditional Puts: all written or none. A cancellation whose
    /// reasons are only failed conditions and conflicts is "none written, read again", never
    /// success.
    async fn put_all(&self, puts: Vec<Put<'_>>) -> StoreResult<bool> {
        let items: Vec<Value> = puts
            .into_iter()
            .map(|p| json!({"Put": self.put_request(&p.key, p.body, p.cond).0}))
            .collect();
        let (r, _) = self
            .call("TransactWriteItems", json!({"TransactItems": items}))
            .await?;
        match (r.status, error_type(&r.body).0.as_str()) {
            (200, _) => Ok(true),
            (400, "TransactionCanceledException") if cancelled_by_conflict(&r.body) => Ok(false),
            (400, "TransactionConflictException") => Ok(false),
            _ => Err(self.failure(&r)),
        }
    }

    /// A Scan of the keys under `prefix`, page by page (strongly consistent).
    async fn list(&self, prefix: &str) -> StoreResult<Vec<String>> {
        let mut keys = Vec::new();
        let mut start: Option<Value> = None;
        loop {
            let mut request = json!({
                "TableName": self.name,
                "ConsistentRead": true,
                "ProjectionExpression": "pk",
                "FilterExpression": "begins_with(pk, :p)",
                "ExpressionAttributeValues": {":p": {"S": prefix}},
            });
            if let Some(s) = start.take() {
                request["ExclusiveStartKey"] = s;
            }
            let (r, v) = self.call("Scan", request).await?;
            if r.status != 200 {
                return Err(self.failure(&r));
            }
            let items = v["Items"].as_array().map(Vec::as_slice).unwrap_or(&[]);
            keys.extend(
                items
                    .iter()
                    .filter_map(|i| string(i, "pk").map(str::to_string)),
            );
            match v.get("LastEvaluatedKey") {
                Some(k) if !k.is_null() => start = Some(k.clone()),
                _ => return Ok(keys),
            }
        }
    }

    async fn health(&self, probe: &str, query: HealthQuery) -> StoreResult<Health> {
        super::doctor::health(self, probe, query).await
    }
}

/// Whether a table's description has `pk`, a string, as its only key.
pub fn schema_fits(table: &Value) -> bool {
    let keys = table["KeySchema"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let attrs = table["AttributeDefinitions"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let pk_is_string = attrs
        .iter()
        .any(|a| a["AttributeName"] == "pk" && a["AttributeType"] == "S");
    keys.len() == 1
        && keys[0]["AttributeName"] == "pk"
        && keys[0]["KeyType"] == "HASH"
        && pk_is_string
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn error_types_and_key_schemas() {
        let body = br#"{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException","message":"The conditional request failed"}"#;
        let (kind, message) = super::error_type(body);
        assert_eq!(kind, "ConditionalCheckFailedException");
        assert_eq!(message, "The conditional request failed");
        assert_eq!(super::error_type(b"").0, "");
        let fits = json!({"KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
            "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}]});
        assert!(super::schema_fits(&fits));
        let sorted = json!({"KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"}],
            "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}]});
        assert!(!super::schema_fits(&sorted));
        let number = json!({"KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
            "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "N"}]});
        assert!(!super::schema_fits(&number));
    }

    #[test]
    fn a_transaction_cancelled_by_other_writers_is_a_conflict() {
        // DynamoDB Local's answer to a TransactWriteItems whose second condition failed.
        let lost = br#"{"__type":"com.amazonaws.dynamodb.v20120810#TransactionCanceledException","CancellationReasons":[{"Code":"None"},{"Code":"ConditionalCheckFailed","Message":"The conditional request failed"}],"Message":"Transaction cancelled, please refer cancellation reasons for specific reasons [None, ConditionalCheckFailed]"}"#;
        assert!(super::cancelled_by_conflict(lost));
        // Without the reasons' list, the message's.
        let bare = br#"{"__type":"TransactionCanceledException","message":"Transaction cancelled, please refer cancellation reasons for specific reasons [TransactionConflict, None]"}"#;
        assert!(super::cancelled_by_conflict(bare));
        // Throttling or a bad item is no conflict: an error, never "read again" forever.
        let throttled = br#"{"__type":"TransactionCanceledException","CancellationReasons":[{"Code":"ThrottlingError"},{"Code":"ConditionalCheckFailed"}]}"#;
        assert!(!super::cancelled_by_conflict(throttled));
        let none =
            br#"{"__type":"TransactionCanceledException","CancellationReasons":[{"Code":"None"}]}"#;
        assert!(!super::cancelled_by_conflict(none));
        assert!(!super::cancelled_by_conflict(b""));
    }
}
