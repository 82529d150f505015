//! The request and answer messages of auth management (`/v3/auth/user/*`,
//! `/v3/auth/role/*`, `/v3/auth/enable`, `/v3/auth/disable`) and how their fields are
//! read from JSON (jsonpb names: `perm.permType`, `options.no_password`, …).
//!
//! Why a module of their own: the calls (`calls`) decode them and the management rules
//! (`auth_admin`) answer them; neither owns the other's shapes.

use serde::Serialize;

use crate::accounts::Permission;
use crate::codec::{ser_b64, Header};
use crate::decode::wire::*;

/// A request naming one user or role (user get/delete, role add/get/delete; the
/// JSON field is `name` or `role` by call, see [`crate::calls`]).
#[derive(Default, Debug, Clone)]
pub struct NameRequest {
    pub name: String,
}

crate::message!(NameRequest { b"name" => name: Str });

/// The requests whose one name field is called `role`.
#[derive(Default, Debug, Clone)]
pub struct RoleNameRequest {
    pub name: String,
}

crate::message!(RoleNameRequest { b"role" => name: Str });

#[derive(Default, Debug, Clone)]
pub struct UserOptions {
    pub no_password: bool,
}

crate::message!(UserOptions { b"no_password" | b"noPassword" => no_password: Bool });

/// `AuthUserAddRequest`.
#[derive(Default, Debug, Clone)]
pub struct UserAddRequest {
    pub name: String,
    pub password: String,
    pub options: Option<UserOptions>,
}

crate::message!(UserAddRequest {
    b"name" => name: Str,
    b"password" => password: Str,
    b"options" => options: Nested<UserOptions>,
});

/// `AuthUserChangePasswordRequest`.
#[derive(Default, Debug, Clone)]
pub struct ChangePasswordRequest {
    pub name: String,
    pub password: String,
}

crate::message!(ChangePasswordRequest { b"name" => name: Str, b"password" => password: Str });

/// `AuthUserGrantRoleRequest` (`user`, `role`) and `AuthUserRevokeRoleRequest`
/// (`name`, `role`).
#[derive(Default, Debug, Clone)]
pub struct UserRoleRequest {
    pub user: String,
    pub role: String,
}

crate::message!(UserRoleRequest { b"user" => user: Str, b"role" => role: Str });

#[derive(Default, Debug, Clone)]
pub struct RevokeRoleRequest {
    pub user: String,
    pub role: String,
}

crate::message!(RevokeRoleRequest { b"name" => user: Str, b"role" => role: Str });

pub struct PermType;
impl EnumType for PermType {
    const GO_TYPE: &'static str = "authpb.Permission_Type";
    const NAMES: &'static [&'static str] = &["READ", "WRITE", "READWRITE"];
}

#[derive(Default, Debug, Clone)]
pub struct PermissionMsg {
    pub perm_type: i32,
    pub key: Vec<u8>,
    pub range_end: Vec<u8>,
}

crate::message!(PermissionMsg {
    b"permType" => perm_type: Enum<PermType>,
    b"key" => key: Bytes,
    b"range_end" | b"rangeEnd" => range_end: Bytes,
});

/// `AuthRoleGrantPermissionRequest`.
#[derive(Default, Debug, Clone)]
pub struct RoleGrantRequest {
    pub name: String,
    pub perm: Option<PermissionMsg>,
}

crate::message!(RoleGrantRequest {
    b"name" => name: Str,
    b"perm" => perm: Nested<PermissionMsg>,
});

/// `AuthRoleRevokePermissionRequest` (etcd 3.4: key and range end are bytes).
#[derive(Default, Debug, Clone)]
pub struct RoleRevokeRequest {
    pub role: String,
    pub key: Vec<u8>,
    pub range_end: Vec<u8>,
}

crate::message!(RoleRevokeRequest {
    b"role" => role: Str,
    b"key" => key: Bytes,
    b"range_end" | b"rangeEnd" => range_end: Bytes,
});

/// One auth management call, decoded.
#[derive(Debug, Clone)]
pub enum AuthRequest {
    UserAdd(UserAddRequest),
    UserGet(NameRequest),
    UserList,
    UserDelete(NameRequest),
    UserChangePassword(ChangePasswordRequest),
    UserGrant(UserRoleRequest),
    UserRevoke(RevokeRoleRequest),
    RoleAdd(NameRequest),
    RoleGet(RoleNameRequest),
    RoleList,
    RoleDelete(RoleNameRequest),
    RoleGrant(RoleGrantRequest),
    RoleRevoke(RoleRevokeRequest),
    Enable,
    Disable,
}

/// `authpb.Permission` as answered (`permType` omitted for READ).
#[derive(Serialize, Debug)]
pub struct PermissionOut {
    #[serde(rename = "permType", skip_serializing_if = "Option::is_none")]
    pub perm_type: Option<&'static str>,
    #[serde(serialize_with = "ser_b64", skip_serializing_if = "Vec::is_empty")]
    pub key: Vec<u8>,
    #[serde(serialize_with = "ser_b64", skip_serializing_if = "Vec::is_empty")]
    pub range_end: Vec<u8>,
}

impl PermissionOut {
    pub fn of(p: &Permission) -> Self {
        let perm_type = match p.perm_type {
            0 => None,
            t => Some(
                PermType::NAMES
                    .get(t as usize)
                    .copied()
                    .unwrap_or("UNKNOWN"),
            ),
        };
        PermissionOut {
            perm_type,
            key: p.key.clone(),
            range_end: p.range_end.clone(),
        }
    }
}

/// Every auth management answer: a header and at most one list (user get and role
/// list: `roles`; user list: `users`; role get: `perm`), omitted when empty.
#[derive(Serialize, Debug)]
pub struct AuthAnswer {
    pub header: Header,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub perm: Vec<PermissionOut>,
}

impl AuthAnswer {
    pub fn header(header: Header) -> Self {
        AuthAnswer {
            header,
            users: Vec::new(),
            roles: Vec::new(),
            perm: Vec::new(),
        }
    }
}
